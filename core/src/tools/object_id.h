// Object ids on the command line: 32 hex digits (hi then lo, as printed by
// FormatObjectId) or a decimal number (hi = 0).
#pragma once

#include <string>
#include <string_view>

#include "common/status.h"
#include "dsm/hash_index.h"

namespace pdpm::tools {

// kInvalidArgument naming the text when it is neither form.
Status ParseObjectId(std::string_view text, dsm::ObjectId* id);
// 32 lower-case hex digits.
std::string FormatObjectId(const dsm::ObjectId& id);

}  // namespace pdpm::tools
