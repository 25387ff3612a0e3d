"""The launch plan, resolved before any process group or GPU exists: world and layout, batch,
precision, tokenizer (tokenizer.py), data (data.py), memory and checkpoint size (footprint.py),
communication (scaling.py); printed as a table or JSON (report.py); prepare.py runs it at start."""
