// EXPECT_ERROR_MENTIONING(statement, text): the statement throws megatron::Error whose message
// contains every given piece of text.
#pragma once

#include <gtest/gtest.h>

#include <initializer_list>
#include <string>
#include <string_view>

#include "megatron/error.h"

#define EXPECT_ERROR_MENTIONING(statement, ...)                                              \
  do {                                                                                       \
    try {                                                                                    \
      statement;                                                                             \
      ADD_FAILURE() << #statement " did not throw megatron::Error";                          \
    } catch (const megatron::Error& error_) {                                                \
      const std::string message_ = error_.what();                                            \
      for (std::string_view piece_ : std::initializer_list<std::string_view>{__VA_ARGS__}) { \
        EXPECT_NE(message_.find(piece_), std::string::npos)                                  \
            << "message \"" << message_ << "\" lacks \"" << piece_ << "\"";                  \
      }                                                                                      \
    }                                                                                        \
  } while (false)
