"""The admission webhook: the validating and mutating endpoints of labgate, one FastAPI app per replica.

Its floor, among labgate's (pyproject.toml's import contracts): under the dev cluster (`devcluster`)
and the command line (`cli`, which serves it); beside the tenant reconciler (`rbac`), which it never
imports; over GPU accounting (`labgate.gpu_accounting`) and the shared core (`labgate.core`).

Inside it, floors too, from the top: the routes (`app`); what one replica is made of (`replica`);
a request's path (`serving`, with the app's waiting line and failure table beside it); the rooms and
the replica's other parts (facts, decision reuse, evaluation, reservations, the watch-fed caches,
policy sync, the decision log, provenance facts); the doors (`policy_engine`, `opa_management`,
`provenance.registry`); and the wire types and pure builders all of them speak (`review`,
`admission`, `policy_input`, `pod_templates`, `refusals`, `references`, `registration`).
"""
