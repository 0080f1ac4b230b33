// The little XML that S3 and STS answers need: the contents of an element by its tag, and the
// five predefined entities. Element contents are returned raw (nested elements intact), so an
// outer element can be searched again; XmlUnescape makes character text of a leaf.
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace dsfs {

// The raw contents of every <tag>...</tag> in `xml`, in order (elements without attributes, as
// S3 writes them). An element without its closing tag ends the list.
std::vector<std::string_view> XmlElements(std::string_view xml, std::string_view tag);

// The raw contents of the first <tag>...</tag>; false if there is none.
bool XmlElement(std::string_view xml, std::string_view tag, std::string_view* out);

// `s` with &amp; &lt; &gt; &quot; &apos; replaced by their characters; anything else as it is.
std::string XmlUnescape(std::string_view s);

}  // namespace dsfs
