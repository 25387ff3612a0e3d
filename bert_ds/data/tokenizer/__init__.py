"""Tokenizers: the contract (base.py), WordPiece vocabularies (wordpiece.py), sentencepiece and
`load_tokenizer` (load.py), the [UNK] check of each source (vocab_check.py); the CLI is
`python -m bert_ds.data.tokenizer`."""
