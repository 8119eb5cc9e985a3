"""labgate's shared core (`labgate.core`) and its command line (`labgate.cli`).

The admission webhook (`webhook`) and the tenant reconciler (`rbac`) sit side by side on top of
`labgate.core` and never import each other; `labgate.cli` sits on top of all three.
"""
