"""The left-to-right POS tagger whose tags the POS-input LMs read (Cao & Yu)."""
