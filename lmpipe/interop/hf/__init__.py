"""Hugging Face checkpoints in and out: BERT, ALBERT, XLNet and GPT-2 folders read into
lmpipe's models, and lmpipe's models (pretraining heads and fine-tuned task heads included)
written as folders that `transformers` loads. One module a family (`encoders`: BERT and
ALBERT, `xlnet`, `gpt2`), found by config.json's `model_type` in `registry`."""

from lmpipe.interop.hf.encoder_layers import encoder_config_of
from lmpipe.interop.hf.encoders import albert_from_pretrained, bert_from_pretrained
from lmpipe.interop.hf.gpt2 import gpt2_from_pretrained
from lmpipe.interop.hf.tasks import save_task_pretrained
from lmpipe.interop.hf.writer import save_pretrained, save_pretrainer
from lmpipe.interop.hf.xlnet import xlnet_from_pretrained

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
