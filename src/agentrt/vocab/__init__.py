"""The vocabulary layer: the words, limits and text rules every other layer shares."""
