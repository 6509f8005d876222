"""The serving engine: the dynamic batcher, the model repository and the Open Inference
Protocol, under ``asyncvk serve``."""
