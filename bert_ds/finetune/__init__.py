"""Fine-tuning on GLUE, SQuAD, SWAG and CoNLL-2003 NER: task table, dataset readers, features, metrics.

`tasks` describes each GLUE task and holds the error/report types every reader shares;
`glue_data`, `squad_data`, `swag_data` and `conll_data` turn the official files (or their hub
copies) into examples; `squad_features` cuts SQuAD examples into BERT's windows and maps logits
back to answer text, `ner_features` labels each word's first sub-token and reads tags back;
`metrics` implements the official scores.
"""
