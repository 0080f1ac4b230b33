// A strict parser of Prometheus's text exposition format (version 0.0.4), for the tests of
// `dsfs stats --prometheus` and -o metrics_file (mount/metrics.h). Stricter than Prometheus
// itself where dsfs promises more: every family has a TYPE line, counters end in `_total`.
//
// Rejected: a line that is not a comment, HELP, TYPE or sample; a bad metric or label name
// (a label name beginning with "__" too); a label value with an escape other than \\, \" and
// \n, or unterminated; a repeated label in one series; a value (or timestamp) that is not a
// number; a sample before (or without) its family's TYPE; a second HELP or TYPE of a family,
// or one after its samples; an unknown type; a family's samples not next to each other; the
// same series twice; a counter that does not end in _total or is negative or NaN; a histogram
// whose series lack `le`, whose `le` bounds do not rise, whose buckets are not cumulative,
// that has no +Inf bucket, no _sum or no _count, or whose _count is not its +Inf bucket; text
// that does not end with a newline.
#pragma once

#include <map>
#include <string>
#include <string_view>
#include <vector>

namespace dsfs::testing {

struct PromSample {
  std::string name;                           // as written (with _bucket, _sum, _count)
  std::map<std::string, std::string> labels;  // unescaped values
  double value = 0;
};

struct PromExposition {
  std::map<std::string, std::string> types;  // family -> counter, gauge, histogram, ...
  std::map<std::string, std::string> help;   // family -> its help text
  std::vector<PromSample> samples;           // in order

  // The value of the sample `name` whose labels include `labels`; false if none.
  bool Find(const std::string& name, const std::map<std::string, std::string>& labels,
            double* value) const;
};

// Parses `text`: true, or false with the first error ("line N: why") in *error.
bool ParseExposition(std::string_view text, PromExposition* out, std::string* error);

}  // namespace dsfs::testing
