#pragma once
// The plain reference of the collectives (ops/collectives.hpp): what every rank's
// receive buffer holds after all_reduce (sum), all_gather, reduce_scatter (sum) or
// all_to_all, from every rank's send buffer, computed in double in rank order.
#include <cstdint>
#include <string_view>
#include <vector>

namespace phasebench::reference {

// `inputs[r]`: rank r's send buffer (`count` elements as the request counts them:
// ops/collectives.hpp); returns each rank's receive buffer.
std::vector<std::vector<double>> collective(std::string_view kind, const std::vector<std::vector<float>>& inputs,
                                            std::uint64_t count);

}  // namespace phasebench::reference
