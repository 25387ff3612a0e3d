"""The DeepSpeed engine: its JSON config and precision (ds_config.py), optimizer and schedule
(optim.py), the pipeline's last-stage loss (pipeline_loss.py), and the one factory (build.py)."""
