"""Real data that lmpipe reads from installed packages: Shakespeare's plays and their
labelled views, the SpamAssassin corpus, the Bible, word-similarity sets."""
