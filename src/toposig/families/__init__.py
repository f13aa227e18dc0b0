"""The signature families: one class each (:mod:`toposig.families.base`), held by the open
registry :mod:`toposig.families.registry`, and :func:`~toposig.families.runner.run_families`,
which runs them on a loaded checkpoint.

Importing the package registers the package's own families, in the order they are
listed everywhere; each module registers its family at its end, so adding one is its
file and its line here.
"""

# isort: off
import toposig.families.embedding  # noqa: F401
import toposig.families.weights  # noqa: F401
import toposig.families.landscape  # noqa: F401
import toposig.families.gradients  # noqa: F401
import toposig.families.llc  # noqa: F401
import toposig.families.heads  # noqa: F401
import toposig.families.interlayer  # noqa: F401
import toposig.families.dimension  # noqa: F401
import toposig.families.drift  # noqa: F401
# isort: on
