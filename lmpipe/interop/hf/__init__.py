"""Hugging Face checkpoints in and out: BERT, ALBERT, XLNet and GPT-2 folders read into
lmpipe's models, and lmpipe's models (pretraining heads and fine-tuned task heads included)
written as folders that `transformers` loads."""

from lmpipe.interop.hf.pretrained import (
    albert_from_pretrained,
    bert_from_pretrained,
    gpt2_from_pretrained,
    save_pretrained,
    save_pretrainer,
    xlnet_from_pretrained,
)
from lmpipe.interop.hf.tasks import encoder_config_of, save_task_pretrained

__all__ = [
    "albert_from_pretrained",
    "bert_from_pretrained",
    "encoder_config_of",
    "gpt2_from_pretrained",
    "save_pretrained",
    "save_pretrainer",
    "save_task_pretrained",
    "xlnet_from_pretrained",
]
