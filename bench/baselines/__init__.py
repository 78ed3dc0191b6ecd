"""What users would run instead of lamplighter: checkpoint-restart, and torchft's 10-second poll-and-resubmit runner."""
