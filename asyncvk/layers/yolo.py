"""YOLO post-processing: YoloDetectionOutput (v2) and Yolov3DetectionOutput (decode, sort, NMS)."""
