// libxml2 objects owned by std::unique_ptr: the one set of deleters for the pages parsed with
// libxml2 (HTML index pages, remote/index.cpp; S3 ListObjectsV2 XML, remote/s3/list_objects.cpp).
#pragma once

#include <libxml/HTMLparser.h>
#include <libxml/parser.h>
#include <libxml/tree.h>

#include <memory>

namespace gguf_mount::remote {

/// Frees a parsed document (xmlFreeDoc; HTML documents are xmlDocs too).
struct XmlDocFree {
    void operator()(xmlDoc* d) const noexcept { xmlFreeDoc(d); }
};
/// Frees an XML parser context (xmlFreeParserCtxt).
struct XmlParserFree {
    void operator()(xmlParserCtxt* c) const noexcept { xmlFreeParserCtxt(c); }
};
/// Frees an HTML parser context (htmlFreeParserCtxt).
struct HtmlParserFree {
    void operator()(htmlParserCtxt* c) const noexcept { htmlFreeParserCtxt(c); }
};

using OwnedXmlDoc = std::unique_ptr<xmlDoc, XmlDocFree>;                  ///< null: no document
using OwnedXmlParser = std::unique_ptr<xmlParserCtxt, XmlParserFree>;     ///< null: none
using OwnedHtmlParser = std::unique_ptr<htmlParserCtxt, HtmlParserFree>;  ///< null: none

}  // namespace gguf_mount::remote
