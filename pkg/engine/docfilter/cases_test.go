package docfilter

// matchCase is one query and the documents it is tried on. The facts come
// from MongoDB's query documentation and the server's matcher tests
// (expression_leaf_test.cpp, matcher_test.cpp, jstests/core such as
// array_match2.js, all5.js, dotted_path_in_null.js); the code is ours.
type matchCase struct {
	query string // relaxed Extended JSON
	docs  string // a JSON array of documents, without _id
	want  string // one 1 (matches) or 0 per document
	// unstorable names the value FerretDB refuses to store: such a case
	// runs on raw BSON only.
	unstorable string
	// ferretDeparts says how FerretDB's find departs from MongoDB's
	// documented behaviour on this case; TestMatchAgreesWithFerretDB
	// asserts that it still does, so the list stays true.
	ferretDeparts string
}

var matchCases = []matchCase{
	// Implicit equality.
	{query: `{"a": 1}`, docs: `[{"a": 1}, {"a": 2}, {}]`, want: "100"},
	{query: `{"a": 1}`, docs: `[{"a": 1.0}, {"a": {"$numberLong": "1"}}, {"a": "1"}]`, want: "110"},
	{query: `{"a": "x"}`, docs: `[{"a": "x"}, {"a": "X"}, {"a": ["x", "y"]}]`, want: "101"},
	{query: `{"a": null}`, docs: `[{"a": null}, {}, {"a": 0}, {"a": false}]`, want: "1100"},
	{query: `{"a": [1, 2]}`, docs: `[{"a": [1, 2]}, {"a": [2, 1]}, {"a": [1, 2, 3]}, {"a": 1}]`, want: "1000"},
	{query: `{"a": 1}`, docs: `[{"a": [1, 2]}, {"a": [2, 3]}, {"a": []}]`, want: "100"},
	{query: `{"a": {"b": 1}}`, docs: `[{"a": {"b": 1}}, {"a": {"b": 1, "c": 2}}, {"a": {"b": 1.0}}]`, want: "101"},
	{query: `{"a": {"b": 1, "c": 2}}`, docs: `[{"a": {"c": 2, "b": 1}}, {"a": {"b": 1, "c": 2}}]`, want: "01"},
	{query: `{"a.b": 1}`, docs: `[{"a": {"b": 1}}, {"a": [{"b": 1}, {"b": 2}]}, {"a": [{"b": [0, 1]}]}, {"a": {"c": 1}}, {"a": 1}]`, want: "11100"},
	{query: `{"a.b.c": 5}`, docs: `[{"a": {"b": {"c": 5}}}, {"a": [{"b": [{"c": 5}]}]}, {"a": {"b": {"c": [4, 5]}}}, {"a": {"b": 5}}]`, want: "1110"},
	{query: `{"a.1": 5}`, docs: `[{"a": [4, 5]}, {"a": [5, 4]}, {"a": {"1": 5}}]`, want: "101"},
	{query: `{"a.1.b": 2}`, docs: `[{"a": [{"b": 1}, {"b": 2}]}, {"a": [{"b": 2}, {"b": 1}]}]`, want: "10"},
	{query: `{"a.0": 1}`, docs: `[{"a": [1, 2]}, {"a": [2, 1]}, {"a": []}]`, want: "100"},
	{query: `{"a.0.b": 1}`, docs: `[{"a": [{"b": 1}]}, {"a": [{"b": 2}, {"b": 1}]}]`, want: "10"},
	{query: `{"a.1": 4}`, docs: `[{"a": [{"1": 4}, 5]}, {"a": [4, 5]}]`, want: "10", ferretDeparts: "FerretDB reads a numeric path component only as an array position, not also as a field of the array's documents (jstests/core/array_match2.js)"},
	{query: `{"a.1": 5}`, docs: `[{"a": [{"1": 4}, 5]}, {"a": [5, 4]}]`, want: "10"},
	{query: `{"a.1.foo": 4}`, docs: `[{"a": [{"1": {"foo": 4}}, {"foo": 5}]}, {"a": [{"foo": 4}]}]`, want: "10", ferretDeparts: "FerretDB reads a numeric path component only as an array position, not also as a field of the array's documents (jstests/core/array_match2.js)"},
	{query: `{"a.1.foo": 5}`, docs: `[{"a": [{"1": {"foo": 4}}, {"foo": 5}]}, {"a": [{"foo": 5}]}]`, want: "10"},
	{query: `{"a": true}`, docs: `[{"a": true}, {"a": 1}, {"a": false}]`, want: "100"},
	{query: `{"a": {"$date": "2024-01-01T00:00:00Z"}}`, docs: `[{"a": {"$date": "2024-01-01T00:00:00Z"}}, {"a": "2024-01-01"}]`, want: "10"},
	{query: `{"a": {"$oid": "000000000000000000000001"}}`, docs: `[{"a": {"$oid": "000000000000000000000001"}}, {"a": {"$oid": "000000000000000000000002"}}]`, want: "10"},
	{query: `{"a": ""}`, docs: `[{"a": ""}, {"a": null}, {}]`, want: "100"},
	{query: `{"a": 0}`, docs: `[{"a": -0.0}, {"a": 0}, {"a": false}]`, want: "110"},
	{query: `{"a.b": null}`, docs: `[{"a": {"b": null}}, {"a": {}}, {"a": [{"b": 1}, {}]}, {"a": []}, {"a": 5}, {"a": [5, {"b": 5}]}]`, want: "111010", ferretDeparts: "FerretDB does not match null for an array document without the field, and matches an empty array (jstests/core/dotted_path_in_null.js, indexv.js)"},
	{query: `{"a.b": null}`, docs: `[{"a": [{}, {"b": 1}]}, {"a": [{"b": 1}]}]`, want: "10", ferretDeparts: "FerretDB does not match null for an array document without the field, and matches an empty array (jstests/core/dotted_path_in_null.js, indexv.js)"},
	{query: `{"a.b.c": null}`, docs: `[{"a": [{"b": []}, {"b": {"c": 1}}]}, {"a": [{"b": {}}]}]`, want: "01"},
	{query: `{"a": 1, "b": 2}`, docs: `[{"a": 1, "b": 2}, {"a": 1, "b": 3}, {"b": 2}]`, want: "100"},
	{query: `{}`, docs: `[{"a": 1}, {}]`, want: "11"},
	{query: `{"a": {}}`, docs: `[{"a": {}}, {"a": {"b": 1}}, {}]`, want: "100"},
	{query: `{"a": {"$binary": {"base64": "AQI=", "subType": "00"}}}`, docs: `[{"a": {"$binary": {"base64": "AQI=", "subType": "00"}}}, {"a": {"$binary": {"base64": "AQI=", "subType": "80"}}}]`, want: "10"},
	{query: `{"a": {"$timestamp": {"t": 1, "i": 2}}}`, docs: `[{"a": {"$timestamp": {"t": 1, "i": 2}}}, {"a": {"$timestamp": {"t": 1, "i": 3}}}]`, want: "10"},
	{query: `{"a": {"$numberLong": "9007199254740993"}}`, docs: `[{"a": 9007199254740992.0}, {"a": {"$numberLong": "9007199254740993"}}]`, want: "01"},
	{query: `{"a": 1}`, docs: `[{"a": {"$numberDecimal": "1.0"}}, {"a": {"$numberDecimal": "1.1"}}]`, want: "10", unstorable: "Decimal128"},
	{query: `{"a": 1}`, docs: `[{"a": [[1]]}, {"a": [[2], 1]}]`, want: "01", unstorable: "arrays in arrays"},
	{query: `{"a": [1]}`, docs: `[{"a": [[1]]}, {"a": [1]}]`, want: "11", unstorable: "arrays in arrays"},

	// $eq $ne $gt $gte $lt $lte.
	{query: `{"a": {"$eq": 1}}`, docs: `[{"a": [1]}, {"a": 1}, {"a": "1"}]`, want: "110"},
	{query: `{"a": {"$eq": [1, 2]}}`, docs: `[{"a": [1, 2]}, {"a": 1}]`, want: "10"},
	{query: `{"a": {"$eq": null}}`, docs: `[{"a": null}, {}, {"a": [null]}, {"a": []}]`, want: "1110"},
	{query: `{"a": {"$eq": {"$regularExpression": {"pattern": "x", "options": ""}}}}`, docs: `[{"a": "x"}, {"a": {"$regularExpression": {"pattern": "x", "options": ""}}}]`, want: "01"},
	{query: `{"a": {"$gt": 1}}`, docs: `[{"a": 2}, {"a": 1}, {"a": 1.5}, {"a": "3"}, {}]`, want: "10100"},
	{query: `{"a": {"$gte": 1}}`, docs: `[{"a": 1}, {"a": 0}, {"a": {"$numberLong": "5"}}]`, want: "101"},
	{query: `{"a": {"$lt": "b"}}`, docs: `[{"a": "a"}, {"a": "c"}, {"a": 1}, {"a": "B"}]`, want: "1001"},
	{query: `{"a": {"$lte": null}}`, docs: `[{"a": null}, {}, {"a": 0}]`, want: "110"},
	{query: `{"a": {"$gt": null}}`, docs: `[{"a": null}, {}, {"a": 1}]`, want: "000"},
	{query: `{"a": {"$lt": null}}`, docs: `[{"a": null}, {}, {"a": 1}]`, want: "000"},
	{query: `{"a": {"$gte": null}}`, docs: `[{"a": null}, {}, {"a": 1}]`, want: "110"},
	{query: `{"a": {"$gt": 2}}`, docs: `[{"a": [1, 3]}, {"a": [1, 2]}, {"a": []}]`, want: "100"},
	{query: `{"a": {"$gt": 1, "$lt": 3}}`, docs: `[{"a": 2}, {"a": [0, 4]}, {"a": [0, 2]}, {"a": 3}]`, want: "1110"},
	{query: `{"a": {"$gt": {"$date": "2020-01-01T00:00:00Z"}}}`, docs: `[{"a": {"$date": "2021-01-01T00:00:00Z"}}, {"a": {"$date": "2019-01-01T00:00:00Z"}}, {"a": 5}]`, want: "100"},
	{query: `{"a": {"$lt": {"$date": "1970-01-01T00:00:00Z"}}}`, docs: `[{"a": {"$date": "1960-01-01T00:00:00Z"}}, {"a": {"$date": "1980-01-01T00:00:00Z"}}]`, want: "10"},
	{query: `{"a": {"$lt": [2]}}`, docs: `[{"a": [1]}, {"a": [3]}]`, want: "10"},
	{query: `{"a": {"$gt": {"b": 1}}}`, docs: `[{"a": {"b": 2}}, {"a": {"b": 0}}, {"a": {"c": 0}}, {"a": 5}]`, want: "1010"},
	{query: `{"a": {"$ne": 1}}`, docs: `[{"a": 1}, {"a": 2}, {}, {"a": [1, 2]}, {"a": [2, 3]}]`, want: "01101"},
	{query: `{"a": {"$ne": null}}`, docs: `[{"a": null}, {}, {"a": 0}]`, want: "001"},
	{query: `{"a.b": {"$ne": 1}}`, docs: `[{"a": [{"b": 1}, {"b": 2}]}, {"a": [{"b": 2}]}, {"a": {}}]`, want: "011", ferretDeparts: "FerretDB matches when some array element differs; MongoDB negates the whole field: no element may equal"},
	{query: `{"a.b": {"$ne": null}}`, docs: `[{"a": [{"b": 1}, {}]}, {"a": [{"b": 1}]}, {"a": 5}]`, want: "010", ferretDeparts: "FerretDB does not match null for an array document without the field, and matches an empty array (jstests/core/dotted_path_in_null.js, indexv.js)"},
	{query: `{"a": {"$lt": {"$numberLong": "9007199254740993"}}}`, docs: `[{"a": 9007199254740992.0}, {"a": {"$numberLong": "9007199254740993"}}]`, want: "10"},
	{query: `{"a": {"$lt": {"$numberLong": "9223372036854775807"}}}`, docs: `[{"a": 9.223372036854776e18}, {"a": {"$numberLong": "9223372036854775806"}}]`, want: "01"},
	{query: `{"a": {"$gt": 1}}`, docs: `[{"a": true}, {"a": {"$date": "2021-01-01T00:00:00Z"}}, {"a": "2"}]`, want: "000"},
	{query: `{"a": {"$lte": 5}}`, docs: `[{"a": 5}, {"a": 5.0}, {"a": 5.1}, {"a": {"$numberLong": "4"}}]`, want: "1101"},
	{query: `{"a": {"$gt": {"$oid": "000000000000000000000001"}}}`, docs: `[{"a": {"$oid": "000000000000000000000002"}}, {"a": {"$oid": "000000000000000000000000"}}, {"a": "z"}]`, want: "100"},
	{query: `{"a": {"$lt": {"$timestamp": {"t": 5, "i": 0}}}}`, docs: `[{"a": {"$timestamp": {"t": 4, "i": 9}}}, {"a": {"$timestamp": {"t": 5, "i": 1}}}]`, want: "10"},
	{query: `{"a": {"$gt": false}}`, docs: `[{"a": true}, {"a": false}, {"a": 1}]`, want: "100"},
	{query: `{"a": {"$gt": {"$binary": {"base64": "AQI=", "subType": "00"}}}}`, docs: `[{"a": {"$binary": {"base64": "AQID", "subType": "00"}}}, {"a": {"$binary": {"base64": "AQI=", "subType": "80"}}}, {"a": {"$binary": {"base64": "AQ==", "subType": "00"}}}]`, want: "110"},
	{query: `{"a": {"$gte": "a", "$lt": "b"}}`, docs: `[{"a": "apple"}, {"a": "banana"}, {"a": "a"}]`, want: "101"},
	{query: `{"a": {"$gt": 0}}`, docs: `[{"a": -0.0}, {"a": 0.1}]`, want: "01"},
	{query: `{"a.b": {"$gt": 1}}`, docs: `[{"a": [{"b": 0}, {"b": 2}]}, {"a": [{"b": [0, 3]}]}, {"a": [{"b": 0}]}]`, want: "110"},
	{query: `{"a": {"$gt": 1}, "b": {"$lt": 1}}`, docs: `[{"a": 2, "b": 0}, {"a": 2, "b": 2}]`, want: "10"},
	{query: `{"a": {"$eq": {"$numberDouble": "NaN"}}}`, docs: `[{"a": {"$numberDouble": "NaN"}}, {"a": 1}]`, want: "10", unstorable: "NaN"},
	{query: `{"a": {"$gt": {"$numberDouble": "NaN"}}}`, docs: `[{"a": {"$numberDouble": "NaN"}}, {"a": 1}]`, want: "00", unstorable: "NaN"},
	{query: `{"a": {"$gte": {"$numberDouble": "NaN"}}}`, docs: `[{"a": {"$numberDouble": "NaN"}}, {"a": 1}]`, want: "10", unstorable: "NaN"},
	{query: `{"a": {"$lt": 1}}`, docs: `[{"a": {"$numberDouble": "NaN"}}, {"a": {"$numberDouble": "-Infinity"}}]`, want: "01", unstorable: "NaN and -Infinity"},
	{query: `{"a": {"$lte": {"$numberDecimal": "NaN"}}}`, docs: `[{"a": {"$numberDouble": "NaN"}}, {"a": 0}]`, want: "10", unstorable: "NaN"},
	{query: `{"a": {"$lt": {"$numberDecimal": "0.1"}}}`, docs: `[{"a": 0.1}, {"a": 0.09}]`, want: "01", unstorable: "Decimal128"},
	{query: `{"a": {"$gt": {"$numberDecimal": "0.1"}}}`, docs: `[{"a": 0.1}, {"a": {"$numberDecimal": "0.10"}}]`, want: "10", unstorable: "Decimal128"},
	{query: `{"a": {"$lt": {"$maxKey": 1}}}`, docs: `[{"a": 1}, {"a": "x"}, {}, {"a": null}, {"a": {"$maxKey": 1}}]`, want: "11110", unstorable: "MaxKey"},
	{query: `{"a": {"$gt": {"$minKey": 1}}}`, docs: `[{"a": 1}, {}, {"a": {"$minKey": 1}}]`, want: "110", unstorable: "MinKey"},
	{query: `{"a": {"$eq": {"$maxKey": 1}}}`, docs: `[{"a": {"$maxKey": 1}}, {"a": 1}]`, want: "10", unstorable: "MaxKey"},
	{query: `{"a": {"$gt": {"$maxKey": 1}}}`, docs: `[{"a": 1}, {"a": {"$maxKey": 1}}]`, want: "00", unstorable: "MaxKey"},
	{query: `{"a": "x"}`, docs: `[{"a": {"$symbol": "x"}}, {"a": {"$symbol": "y"}}]`, want: "10", unstorable: "Symbol"},
}
