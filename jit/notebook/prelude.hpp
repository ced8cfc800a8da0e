// jit/notebook/prelude.hpp — what every notebook session starts with: sinter's DSL, the display
// helpers, <iostream> and <thread>, with sinter's names in scope (precompiled at build time)
#pragma once
#include "dsl/sinter.hpp"
#include "jit/notebook/display.hpp"

#include <iostream>
#include <thread>

using namespace sinter;
using namespace sinter::notebook;
