"""Pure core: intent parsing and canonical form, fingerprints, the state table."""
