"""Operations: the periodic re-clustering (snapshot, challenger, stable ids, safe promotion),
config validation without running anything, and job submission to a Ray cluster."""
