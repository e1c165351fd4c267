"""Client request bodies checked field by field into typed requests; every refusal a 400 naming its `param`."""
