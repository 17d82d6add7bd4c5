"""Inputs of the job: latent TFRecords, manifests of frame folders and video files."""
