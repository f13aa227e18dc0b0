"""Loading a checkpoint's model and tokenizer: what kind of language model it is (causal
or masked; anything else is refused), whether its head's weights are in the checkpoint
(a head that would be random is refused, naming the weights), and ``from_pretrained``
with the safeguards of :mod:`toposig.sources.checkpoints` (``trust_remote_code`` only when
asked, plain PyTorch files read with ``weights_only=True``)."""

from __future__ import annotations

import logging
from pathlib import Path

from toposig.sources.checkpoints import MIN_VOCAB, Checkpoint, SeriesError

logger = logging.getLogger(__name__)


CAUSAL, MASKED = "causal", "masked"
# Class-name endings of checkpoints that carry a language-model head.
LM_HEAD_CLASSES = ("ForCausalLM", "LMHeadModel", "ForMaskedLM", "ForPreTraining",
                   "WithLMHead", "LMHead")


class UnsupportedModelError(ValueError):
    """A model that is neither a causal nor a masked language model (T5, a classifier)."""


def model_kind(config) -> str:
    """``"causal"`` (a decoder: next-token loss) or ``"masked"`` (an encoder such as BERT:
    masked-LM loss), from a ``transformers`` config.

    BERT-family types are in both of transformers' causal-LM and masked-LM tables; they
    are decoders only when their config says ``is_decoder``, so they are encoders
    otherwise (``AutoModelForCausalLM`` would load one, and its "next-token" loss would
    mean nothing).

    Raises:
        UnsupportedModelError: an encoder-decoder, or a model with no language-model
            head of either kind; the message names it.
    """
    from transformers.models.auto.modeling_auto import (
        MODEL_FOR_CAUSAL_LM_MAPPING_NAMES,
        MODEL_FOR_MASKED_LM_MAPPING_NAMES,
    )

    model_type = getattr(config, "model_type", None)
    archs = list(getattr(config, "architectures", None) or [])
    what = f"{model_type or 'unknown'} ({', '.join(archs) or 'no architectures listed'})"
    if getattr(config, "is_encoder_decoder", False):
        raise UnsupportedModelError(
            f"{what} is an encoder-decoder model: toposig measures causal language models "
            "(next-token loss) and masked-LM encoders, not encoder-decoders")
    if archs and not any(a.endswith(LM_HEAD_CLASSES) for a in archs):
        raise UnsupportedModelError(
            f"{what} was saved without a language-model head (a classifier or a bare "
            "encoder): loading it as a language model would give it a random head")
    if model_type in MODEL_FOR_MASKED_LM_MAPPING_NAMES and not getattr(config, "is_decoder",
                                                                       False):
        return MASKED
    if model_type in MODEL_FOR_CAUSAL_LM_MAPPING_NAMES:
        return CAUSAL
    if any(a.endswith(("ForCausalLM", "LMHeadModel")) for a in archs):
        return CAUSAL  # remote code (--trust-remote-code) naming a causal-LM class
    if any(a.endswith("ForMaskedLM") for a in archs):
        return MASKED
    raise UnsupportedModelError(f"{what} has no causal or masked language-model head that "
                                "transformers knows of")


def load_config(ckpt: Checkpoint, *, local_files_only: bool = False,
                trust_remote_code: bool = False):
    """The checkpoint's ``transformers`` config (no weights are read)."""
    from transformers import AutoConfig

    source, revision = ckpt.load_source
    return AutoConfig.from_pretrained(source, revision=revision,
                                      local_files_only=local_files_only,
                                      trust_remote_code=trust_remote_code)


def series_kinds(checkpoints: list[Checkpoint], *, local_files_only: bool = False,
                 trust_remote_code: bool = False) -> dict[str, str | None]:
    """Each series' kind (:func:`model_kind` of its first checkpoint's config), by label;
    ``None`` where the config cannot be read now (an uncached Hub revision offline: its
    load will tell). Plain state-dict files have none.

    Raises:
        SeriesError: a series whose model is neither causal nor masked, naming it.
    """
    out: dict[str, str | None] = {}
    for c in checkpoints:
        if c.source == "file" or c.label in out:
            continue
        try:
            config = load_config(c, local_files_only=local_files_only or c.source != "hub",
                                 trust_remote_code=trust_remote_code)
        except Exception as exc:  # noqa: BLE001 - unreadable now; loading will say why
            logger.debug("config of %s not read before the run: %s", c.describe(), exc)
            out[c.label] = None
            continue
        try:
            out[c.label] = model_kind(config)
            check_head_weights(config, out[c.label])
        except UnsupportedModelError as exc:
            raise SeriesError(f"{c.model!r}: {exc}") from exc
    return out


def random_weights_message(missing: list[str], model_class: str, auto_name: str) -> str:
    """The refusal of a checkpoint that lacks ``missing`` weights of ``model_class``, the
    class it would be loaded as (``auto_name``: ``ForMaskedLM``, ``ForCausalLM``)."""
    return (f"{len(missing)} weight(s) of {model_class} are not in the checkpoint and would "
            f"be random ({', '.join(missing[:4])}{' ...' if len(missing) > 4 else ''}); it "
            f"is not a {auto_name} checkpoint")


def _lm_auto_class(kind: str):
    from transformers import AutoModelForCausalLM, AutoModelForMaskedLM

    return AutoModelForMaskedLM if kind == MASKED else AutoModelForCausalLM


def check_head_weights(config, kind: str) -> None:
    """Refuse, from the config alone, a checkpoint whose saved class lacks weights of the
    class it would be loaded as (``AutoModelForMaskedLM`` / ``AutoModelForCausalLM``'s
    class for ``config``, by ``kind``): loading would make them random. ELECTRA's
    discriminator (``ElectraForPreTraining``) is one: it has no generator head, so as an
    ``ElectraForMaskedLM`` its language-model head would be random.

    Both classes are built on the meta device (no memory, no weight read), and the names
    the loader class has that the saved one has not, less the weights the loader ties to
    others, are the missing ones: the message is the one :func:`load_model` gives after
    loading. Nothing is checked when ``architectures`` names no class ``transformers``
    has (remote code) or the class it would be loaded as; loading checks those.

    Raises:
        UnsupportedModelError: weights would be random; the message names them.
    """
    import copy

    import transformers

    archs = list(getattr(config, "architectures", None) or [])
    auto = _lm_auto_class(kind)
    saved = getattr(transformers, archs[0], None) if archs else None
    try:
        target = auto._model_mapping[type(config)]
    except (KeyError, ValueError):
        return
    if not isinstance(saved, type) or saved is target:
        return
    import torch

    try:
        with torch.device("meta"):
            have = saved(copy.deepcopy(config))
            want = target(copy.deepcopy(config))
    except Exception as exc:  # noqa: BLE001 - not buildable here: loading will check
        logger.debug("%s and %s not compared: %s", saved.__name__, target.__name__, exc)
        return
    tied = getattr(want, "all_tied_weights_keys", None)
    tied = set(tied) if isinstance(tied, dict) else set()
    own = set(have.state_dict())
    missing = sorted(set(want.state_dict()) - own - tied)
    if not missing:
        return
    what = ("a replaced-token-detection discriminator, which predicts no tokens"
            if any(k.startswith("discriminator_predictions.") for k in own) else
            "whose weights have no such ones")
    raise UnsupportedModelError(
        f"{random_weights_message(missing, target.__name__, auto.__name__[9:])} (its "
        f"config names {saved.__name__}: {what})")


# --- loading -------------------------------------------------------------------------


def load_model(ckpt: Checkpoint, torch_dtype, device: str, *, local_files_only: bool = False,
               trust_remote_code: bool = False, reuse: bool = False):
    """Load a checkpoint in eval mode on ``device``: as a causal LM, or as a masked LM
    when it is an encoder (:func:`model_kind`).

    With ``reuse`` (for a caller that only reads the weights, and gives the model back
    with :func:`toposig.sources.reload.release` when done), a local folder of the same
    config and tensors as the series' previous checkpoint is copied into that model
    instead (:mod:`toposig.sources.reload`: the same tensors, without building a model).

    Raises:
        UnsupportedModelError: neither kind; a class whose head weights would be random,
            told by the config before any weight is read (:func:`check_head_weights`:
            ELECTRA's discriminator) or by the loader after (weights missing from the
            files).
    """
    from toposig.sources import reload

    source, revision = ckpt.load_source
    folder = (source if reuse and revision is None and not trust_remote_code
              and Path(source).is_dir() else None)
    if folder is not None:
        reused = reload.reload(folder, torch_dtype, device)
        if reused is not None:
            return reused
    config = load_config(ckpt, local_files_only=local_files_only,
                         trust_remote_code=trust_remote_code)
    kind = model_kind(config)
    try:
        check_head_weights(config, kind)  # from the config: before any weight is read
    except UnsupportedModelError as exc:
        raise UnsupportedModelError(f"{ckpt.describe()}: {exc}") from exc
    auto = _lm_auto_class(kind)
    model, info = auto.from_pretrained(
        source,
        revision=revision,
        config=config,
        dtype=torch_dtype,
        local_files_only=local_files_only,
        trust_remote_code=trust_remote_code,
        output_loading_info=True,
    )
    missing = sorted(info.get("missing_keys") or ())
    if missing:
        raise UnsupportedModelError(f"{ckpt.describe()}: " + random_weights_message(
            missing, type(model).__name__, auto.__name__[9:]))
    model = model.to(device).eval()
    if folder is not None:
        reload.remember(folder, model, torch_dtype, device)
    return model


def load_tokenizer(ckpt: Checkpoint, override: str | None = None, *,
                   local_files_only: bool = False, trust_remote_code: bool = False):
    """The checkpoint's tokenizer, or ``override`` (Hub name, folder, or tokenizer.json file).

    Padding is on the right with the EOS token when the tokenizer has no pad token.
    """
    from transformers import AutoTokenizer, PreTrainedTokenizerFast

    if override and Path(override).is_file():
        tok = PreTrainedTokenizerFast(tokenizer_file=override)
        if tok.eos_token is None:
            if "<|endoftext|>" not in tok.get_vocab():
                raise SeriesError(
                    f"tokenizer file {override!r} defines no EOS token; pass a tokenizer folder"
                )
            tok.eos_token = "<|endoftext|>"
    else:
        source, revision = (override, None) if override else ckpt.load_source
        tok = AutoTokenizer.from_pretrained(
            source, revision=revision, local_files_only=local_files_only,
            trust_remote_code=trust_remote_code,
        )
    if len(tok) < MIN_VOCAB:
        raise SeriesError(f"the tokenizer for {ckpt.describe()} has only {len(tok)} tokens: "
                          "the checkpoint carries no usable tokenizer; pass --tokenizer")
    if tok.pad_token is None:
        if tok.eos_token is None:
            raise SeriesError(f"tokenizer of {ckpt.describe()} has neither pad nor EOS token")
        tok.pad_token = tok.eos_token
    tok.padding_side = "right"
    return tok
