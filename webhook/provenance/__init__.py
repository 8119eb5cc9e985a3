"""Image provenance: which image a pod really runs (reference normalisation, tag-to-digest resolution)
and who vouched for it (cosign signatures), gathered as facts for the policies to judge."""
