"""Fine-tuning data: the GLUE task table and the error/report types every reader shares
(tasks.py); readers of the official files or their hub copies (glue.py, squad.py, swag.py,
conll.py); SQuAD's windows and answer decoding (squad_features.py); NER's first-sub-token labels
(ner_features.py)."""
