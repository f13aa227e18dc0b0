"""The command line: ``toposig run|analyze|train|extract`` and the scripts in ``src/``.

Each command is a module with ``build_parser(prog)`` and ``main(argv, prog)``:
:mod:`~toposig.cli.run` (checkpoints -> records), :mod:`~toposig.cli.analyze` (records ->
statistics, summary, figures), :mod:`~toposig.cli.train` (train a model suite) and
:mod:`~toposig.cli.extract` (one checkpoint's record). :mod:`~toposig.cli.options` holds
the options they share; :mod:`~toposig.cli.main` is the ``toposig`` command.
"""
