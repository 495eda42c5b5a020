"""Labelled data for fine-tuning: the user's labelled, tagged and question files, read,
checked and turned into model inputs."""
