package labgate.lib.gpu_text_test

import data.labgate.lib.gpu_text
import data.labgate.lib.testdata

test_asks_name_the_model_or_its_absence if {
	spec := {"containers": [
		testdata.gpu_container("a", {"nvidia.com/gpu": "2"}),
		testdata.gpu_container("b", {"nvidia.com/gpu": "6"}),
	]}
	gpu_text.describe_asks(spec) == "8 nvidia.com/gpu (model unspecified)"
}

test_counts_are_plural_beyond_one if {
	gpu_text.plural(1, "GPU") == "1 GPU"
	gpu_text.plural(8, "h100 GPU") == "8 h100 GPUs"
	gpu_text.plural(0, "pod") == "0 pods"
}

test_asks_are_listed_per_resource_and_model if {
	gpu_text.describe([
		{"resource": "nvidia.com/gpu", "model": "h100", "count": 2},
		{"resource": "nvidia.com/gpu", "model": "h100", "count": 1},
		{"resource": "nvidia.com/mig-1g.10gb", "model": "mig-1g.10gb", "count": 1},
	]) == "3 nvidia.com/gpu (h100), 1 nvidia.com/mig-1g.10gb"
}
