# METADATA
# title: Kubernetes resource quantities
# description: |
#   A resource quantity ("500m", "8", 8, "64Gi", "1e3", "100n") as the number it stands for, in the
#   forms the apiserver writes (resource.Quantity's canonical text). OPA's units.parse reads every
#   suffix but n (nano) and u (micro), which the apiserver keeps for a value that is not a whole
#   number of milli-units ("100000000001n" CPUs): those are read as the decimal exponents they are,
#   exactly. The Python counting (labgate/gpu_accounting/demand.py, quantity) reads the same forms to
#   the same numbers; tests/unit/gpu/test_quantity_forms.py holds the two against hand-counted values.
package labgate.lib.quantity

# METADATA
# scope: document
# title: A quantity as a number
# description: |
#   A JSON number as it is, a quantity's text by its suffix. Undefined for text that is no quantity
#   (the apiserver refuses those before admission).
number(q) := q if is_number(q)

number(q) := units.parse(_exponent_form(q)) if is_string(q)

_exponent_form(q) := concat("", [trim_suffix(q, "n"), "e-9"]) if {
	endswith(q, "n")
} else := concat("", [trim_suffix(q, "u"), "e-6"]) if {
	endswith(q, "u")
} else := q
