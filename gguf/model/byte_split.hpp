// Raw byte-split parts: models published as plain byte pieces to be joined with `cat`; only the
// first piece starts with the GGUF magic. Two naming styles exist:
//
//   letters:  NAME.gguf-split-a, NAME.gguf-split-b, ...    (like split(1) suffixes; the same
//             number of letters in every piece: -aa, -ab, ... is a separate group from -a, -b)
//   part-of:  NAME.gguf.part1of3, NAME.gguf.part2of3, NAME.gguf.part3of3   (ordered by the
//             number X, so part10of12 comes after part2of12)
//
// Either way the pieces form the logical file NAME.gguf. Detection here is a pure function of a
// directory's names; whether the concatenation really is a GGUF file is checked by the catalog
// (gguf/model/catalog.hpp), which reads it with the strict reader.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace gguf {

/// The naming style of a byte-split piece.
enum class ByteSplitStyle : uint8_t {
    Letters,  // NAME.gguf-split-a
    PartOf,   // NAME.gguf.partXofY
};

/// What a piece's name says.
struct ByteSplitName {
    std::string logical;          // "NAME.gguf": ends in ".gguf", never just ".gguf"
    ByteSplitStyle style = ByteSplitStyle::Letters;
    uint64_t index = 0;           // 0-based position: -a -> 0, -b -> 1, -ba -> 26; part1of3 -> 0
    uint64_t count = 0;           // PartOf: Y; Letters: 0 (the name does not say)
    uint32_t suffix_length = 0;   // Letters: number of letters (1..4); PartOf: 0
};

/// Parses a piece name (no directory). Letters: "NAME.gguf-split-" + 1 to 4 lowercase letters.
/// PartOf: "NAME.gguf.part" + X + "of" + Y, X and Y decimal (1 to 6 digits each, leading zeros
/// allowed), 1 <= X <= Y. NAME must be non-empty. Returns nullopt for every other name.
/// Examples: "m.gguf-split-b" -> {"m.gguf", Letters, 1}; "m.gguf.part10of12" -> {"m.gguf",
/// PartOf, 9, 12}; "m.gguf-split-B", "m.gguf.part0of2", "m.gguf.part3of2", ".gguf.part1of1" -> nullopt.
std::optional<ByteSplitName> parse_byte_split_name(std::string_view name);

/// One group of pieces with the same logical name, style and (PartOf) count or (Letters) suffix
/// length.
struct ByteSplitGroup {
    std::string logical;              // "NAME.gguf"
    ByteSplitStyle style = ByteSplitStyle::Letters;
    std::vector<std::string> pieces;  // piece names in concatenation order (complete groups), or
                                      // in name order (incomplete groups)
    /// Empty when the group is complete: PartOf has every X in 1..Y exactly once; Letters has
    /// indices 0..n-1 with no gap and no duplicate (a missing LAST letter piece cannot be seen
    /// from the names: the strict GGUF read of the concatenation catches it as truncated).
    /// Otherwise a one-line reason naming the logical file, e.g.
    /// "m.gguf: byte-split part 2 of 3 (m.gguf.part2of3) is missing".
    std::string problem;
};

/// Finds every byte-split group among `names` (the entries of ONE directory, no paths).
/// Groups are sorted by logical name, then style (Letters first), then count / suffix length.
/// Every name that parses as a piece belongs to exactly one group. Pure: no I/O.
std::vector<ByteSplitGroup> detect_byte_splits(const std::vector<std::string>& names);

}  // namespace gguf
