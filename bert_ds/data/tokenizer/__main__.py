"""`python -m bert_ds.data.tokenizer`: train a sentencepiece model, or encode text (load.py's CLI)."""

import sys

from bert_ds.data.tokenizer.load import main

sys.exit(main())
