"""Training-side code. So far: the synthetic person scenes used for offline calibration."""
