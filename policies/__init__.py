"""Tenant policies: policy files, their loading and hot reload, authentication, audit and limits."""
