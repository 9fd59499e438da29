"""The watchers, one family of the script's calls each: torch's hooks where they exist,
wrappers where none does. Each records what it saw on the rank's recorder."""
