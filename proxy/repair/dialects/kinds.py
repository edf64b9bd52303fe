"""The kinds of change a schema rewrite makes, as counted on the exchange."""

from __future__ import annotations

REF_INLINED_KIND = "schema_ref_inlined"
REF_UNRESOLVED_KIND = "schema_ref_unresolved"
RECURSION_CUT_KIND = "schema_recursion_cut"
TUPLE_KIND = "schema_tuple_rewritten"
TYPE_ARRAY_KIND = "schema_type_array_rewritten"
NULL_TO_NULLABLE_KIND = "schema_null_to_nullable"
CONST_TO_ENUM_KIND = "schema_const_to_enum"
ONE_OF_KIND = "schema_one_of_to_any_of"
ALL_OF_MERGED_KIND = "schema_all_of_merged"
MOVED_TO_DESCRIPTION_KIND = "schema_keyword_moved_to_description"
REMOVED_KIND = "schema_keyword_removed"
TYPE_ADDED_KIND = "schema_type_added"
TYPE_MOVED_INTO_ANY_OF_KIND = "schema_type_moved_into_any_of"
TYPE_UNKNOWN_KIND = "schema_type_unknown"
