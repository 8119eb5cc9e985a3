package labgate.lib.quantity_test

import data.labgate.lib.quantity

test_every_suffix_the_apiserver_writes_is_read if {
	quantity.number("100n") == 0.0000001
	quantity.number("1500u") == 0.0015
	quantity.number("250m") == 0.25
	quantity.number("2") == 2
	quantity.number("1k") == 1000
	quantity.number("1e3") == 1000
	quantity.number("64Mi") == 67108864
	quantity.number(8) == 8
}

# 100 CPUs and a billionth: the apiserver keeps it in n, and it is more than 100 CPUs.
test_nano_and_micro_keep_every_digit if {
	ceil(quantity.number("100000000001n") * 1000) == 100001
	ceil(quantity.number("17179869184000001u")) == 17179869185
	ceil(quantity.number("1000000n") * 1000) == 1
}

test_text_that_is_no_quantity_is_undefined if {
	not quantity.number("lots")
	not quantity.number("n")
}
