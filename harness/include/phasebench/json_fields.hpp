#pragma once
// JSON forms of the workload types, shared by the analytical model's --json
// output and the results files so both use the same field names.
#include <nlohmann/json.hpp>

#include "phasebench/model.hpp"
#include "phasebench/roofline.hpp"
#include "phasebench/workload.hpp"

namespace phasebench {

// {"weights","kv_cache","activations","block_table","writes","total"} in bytes.
nlohmann::json bytes_json(const Bytes& b);
// {"flops","bytes":{...},"intensity"}.
nlohmann::json cost_json(const OpCost& c);
// Every ceiling with its source and method: {"compute":{"bf16":[...]}, "bandwidth":[...]}.
nlohmann::json ceilings_json(const Ceilings& c);
// JSON numbers must be finite (strict JSON): NaN/inf become null.
nlohmann::json finite_or_null(double v);

}  // namespace phasebench
