"""SSD post-processing: PriorBox (anchor boxes) and DetectionOutput (decode, sort, NMS)."""
