"""One canitoolcall adapter module per fixture family (FAMILY, ENGINE, EXPECTED_FAILURES)."""
