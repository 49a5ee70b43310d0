"""Files: checkpoints (one reader for every model), prompt embeddings, video output."""
