// ops/op_id.hpp — OpId, the enum generated from ops/op_list.def, and its name table
#pragma once
#include <cstdint>
#include <string_view>

namespace sinter {

enum class OpId : uint16_t {
#define SINTER_PRIMITIVE(name) name,
#define SINTER_COMPOSITE(name) name,
#include "ops/op_list.def"
};

inline constexpr std::string_view op_names[] = {
#define SINTER_PRIMITIVE(name) #name,
#define SINTER_COMPOSITE(name) #name,
#include "ops/op_list.def"
};

inline constexpr std::size_t num_ops = std::size(op_names);

/// Number of primitives; they occupy OpIds [0, num_primitives).
inline constexpr std::size_t num_primitives = 0
#define SINTER_PRIMITIVE(name) +1
#include "ops/op_list.def"
    ;

constexpr std::string_view op_name(OpId op) { return op_names[static_cast<std::size_t>(op)]; }
constexpr bool is_primitive(OpId op) { return static_cast<std::size_t>(op) < num_primitives; }

} // namespace sinter
