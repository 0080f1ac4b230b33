// Splitting '/'-separated paths (store paths, archive entry names).
#pragma once

#include <cstddef>
#include <string>
#include <string_view>
#include <vector>

namespace dsfs {

// The components of `path` in order, without empty ones and ".": "./a//b/." -> {"a", "b"}.
// ".." is returned as is; what it means is the caller's business. The views point into `path`.
std::vector<std::string_view> PathParts(std::string_view path);
// The non-empty items of a `sep`-separated list ("a,,b" -> a, b), as views into `list`.
std::vector<std::string_view> SplitList(std::string_view list, char sep);
// Decodes one code point of UTF-8 at the start of `s` as Python does (strictly: no overlong
// forms, no surrogates, nothing past U+10FFFF): the bytes it takes, or 0 if `s` does not start
// with one.
size_t Utf8CodePoint(std::string_view s, char32_t* cp);

// `name` as `ls -b` shows it, on a terminal or not: control characters (C0, DEL, C1), bytes
// that are not UTF-8 and the backslash escaped as \ooo (backslash: \\), so that no name can
// break a line of the listing or send the terminal an escape sequence. With
// `escape_backslash` false, for text that already holds escapes (a tensor view's reason, whose
// newlines are \n), the backslash is left as it is.
std::string PrintableName(std::string_view name, bool escape_backslash = true);

}  // namespace dsfs
