"""Fine-tuning on GLUE, SQuAD and SWAG: task table, dataset readers, SQuAD windows and the metrics.

`tasks` describes each GLUE task and holds the error/report types every reader shares;
`glue_data`, `squad_data` and `swag_data` turn the official files (or their hub copies) into
examples; `squad_features` cuts SQuAD examples into BERT's windows and maps logits back to
answer text; `metrics` implements the official scores.
"""
