"""lmpipe's models written as Hugging Face checkpoint folders that `transformers` loads:
`config.json`, `model.safetensors` and the tokenizer's files."""

import json
import pathlib

from safetensors.numpy import save_file

from lmpipe.interop.hf.checkpoint import CONFIG_FILE, WEIGHTS_FILE
from lmpipe.interop.hf.registry import family_of_config
from lmpipe.interop.hf.weights import checkpoint_tensors
from lmpipe.tokenizers.byte_pair import BytePairTokenizer
from lmpipe.tokenizers.sentence_piece import MODEL_FILE, SentencePieceTokenizer

VOCABULARY_FILE = "vocab.txt"
TOKENIZER_CONFIG_FILE = "tokenizer_config.json"


def save_pretrained(directory, model, config, tokenizer=None):
    """Write an lmpipe encoder or GPT as a Hugging Face checkpoint folder that `transformers`
    loads: `config.json` and `model.safetensors` (and the tokenizer's files: `vocab.txt`,
    `spiece.model` or `vocab.json` and `merges.txt`, with `tokenizer_config.json`).

    `model` is a `bert(config)`, `albert(config)` or `xlnet(config)` model (a pipeline's
    `encoder`, or one `*_from_pretrained` loaded), or a `GptCausalLM`; the folder loads as
    `BertModel`, `AlbertModel`, `XLNetModel` (XLNet's pooler has no place there and is left
    out) or `GPT2LMHeadModel`, and back with `bert_from_pretrained` / `albert_from_pretrained`
    / `xlnet_from_pretrained` / `gpt2_from_pretrained`.

    Args:
        directory: the folder to write (created; files in it are replaced).
        model: the encoder, or the GPT.
        config: its `BertConfig`, `AlbertConfig`, `XLNetConfig` or `GptConfig`.
        tokenizer: a `WordPieceTokenizer`, `SentencePieceTokenizer` or `BytePairTokenizer`,
            or None.
    """
    family = family_of_config(config)
    entries = family.model_entries(model, config)
    write_checkpoint(directory, family, entries, family.hf_config(config, tokenizer), tokenizer)


def save_pretrainer(directory, pretrainer, config, tokenizer=None):
    """Write an lmpipe pretraining model with its heads as a Hugging Face folder: a
    `BertPretrainer` as `BertForPreTraining` (`BertForMaskedLM` without a pair head), an
    ALBERT one as `AlbertForPreTraining` (`AlbertForMaskedLM`), an `XLNetPretrainer` as
    `XLNetLMHeadModel` (with `mask_emb` and `lm_loss.bias`). The inverse of
    `load_pretrainer_weights` and `load_xlnet_pretrainer_weights`: the pair head's rows are
    swapped back to Hugging Face's label order; the LM heads' output weights are the tied
    word embedding, as in those classes. Otherwise as `save_pretrained`."""
    family = family_of_config(config)
    if family.pretrainer_checkpoint is None:
        raise ValueError(
            f"`config` is a {type(config).__name__}: lmpipe has no {family.name} pretraining "
            "heads to write; save_pretrained writes the model."
        )
    architecture, entries = family.pretrainer_checkpoint(pretrainer, config)
    hf = family.hf_config(config, tokenizer)
    hf["architectures"] = [architecture]
    write_checkpoint(directory, family, entries, hf, tokenizer)


def write_checkpoint(directory, family, entries, hf, tokenizer):
    """Write `entries`' variables (in the checkpoint's layout, as `family` stores them) as
    model.safetensors, `hf` as config.json, and the tokenizer's files, to `directory`
    (created; its files replaced)."""
    directory = pathlib.Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    tensors = family.stored_tensors(checkpoint_tensors(entries))
    save_file(tensors, str(directory / WEIGHTS_FILE), metadata={"format": "pt"})
    _write_json(directory / CONFIG_FILE, hf)
    if tokenizer is not None:
        _save_hf_tokenizer(directory, tokenizer, family)


def _save_hf_tokenizer(directory, tokenizer, family):
    """The tokenizer files a Hugging Face folder of `family` has (not lmpipe's own
    tokenizer.json, which transformers would take for a fast tokenizer's file)."""
    settings = {"do_lower_case": tokenizer.lower_case}
    if isinstance(tokenizer, BytePairTokenizer):
        tokenizer.write_files(directory)
        end = tokenizer.end_token
        settings = {
            "tokenizer_class": "GPT2Tokenizer",
            "add_prefix_space": tokenizer.add_prefix_space,
            **{f"{role}_token": end for role in ("bos", "eos", "unk")},
        }
    elif isinstance(tokenizer, SentencePieceTokenizer):
        (directory / MODEL_FILE).write_bytes(tokenizer.model)
        settings["keep_accents"] = tokenizer.keep_accents
        settings["tokenizer_class"] = family.sentence_piece_tokenizer
        # transformers' ALBERT and XLNet tokenizers leave the segment ids out unless told to;
        # lmpipe's models read them (pairs, XLNet's <cls> segment), so they must reach the model.
        settings["model_input_names"] = ["input_ids", "token_type_ids", "attention_mask"]
    else:
        with open(directory / VOCABULARY_FILE, "w", encoding="utf-8", newline="\n") as file:
            file.writelines(token + "\n" for token in tokenizer.vocabulary)
        settings["tokenizer_class"] = "BertTokenizer"
    _write_json(directory / TOKENIZER_CONFIG_FILE, settings)


def _write_json(path, fields):
    with open(path, "w", encoding="utf-8") as file:
        json.dump(fields, file, indent=2)
        file.write("\n")
