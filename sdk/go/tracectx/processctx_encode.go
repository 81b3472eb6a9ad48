package tracectx

import "go.opentelemetry.io/otel/attribute"

// encodeResource encodes attrs as an opentelemetry.proto.resource.v1.Resource:
// one KeyValue (key 1, value 2) per attribute, each value an AnyValue with
// string_value (field 1). A hand encoder of these three messages keeps
// protobuf out of applications' module graphs.
func encodeResource(attrs []attribute.KeyValue) []byte {
	var b []byte
	for _, kv := range attrs {
		if !kv.Valid() {
			continue
		}
		key, value := string(kv.Key), kv.Value.String()
		anyValue := lenField(nil, 1, value)
		pair := lenField(nil, 1, key)
		pair = lenField(pair, 2, string(anyValue))
		b = lenField(b, 1, string(pair))
	}
	return b
}

// lenField appends a length-delimited field.
func lenField(b []byte, field int, v string) []byte {
	b = appendVarint(b, uint64(field)<<3|2)
	b = appendVarint(b, uint64(len(v)))
	return append(b, v...)
}

func appendVarint(b []byte, v uint64) []byte {
	for v >= 0x80 {
		b = append(b, byte(v)|0x80)
		v >>= 7
	}
	return append(b, byte(v))
}
