"""lmpipe's models and tokenizers in and out of other libraries' formats (`hf`: Hugging Face)."""
