"""Real labelled data built from installed packages: Shakespeare's plays labelled by genre, by
name and by speaker, the SpamAssassin corpus, word-similarity sets."""
