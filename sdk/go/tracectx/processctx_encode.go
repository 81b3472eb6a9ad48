package tracectx

import "go.opentelemetry.io/otel/attribute"

// encodeProcessContext encodes attrs as the OTEP's payload, an
// opentelemetry.proto.processcontext.v1development.ProcessContext whose
// resource (field 1) is an opentelemetry.proto.resource.v1.Resource: one
// KeyValue (key 1, value 2) per attribute, each value an AnyValue with
// string_value (field 1). A hand encoder of these four messages keeps
// protobuf out of applications' module graphs.
func encodeProcessContext(attrs []attribute.KeyValue) []byte {
	var resource []byte
	for _, kv := range attrs {
		if !kv.Valid() {
			continue
		}
		key, value := string(kv.Key), kv.Value.String()
		anyValue := lenField(nil, 1, value)
		pair := lenField(nil, 1, key)
		pair = lenField(pair, 2, string(anyValue))
		resource = lenField(resource, 1, string(pair))
	}
	return lenField(nil, 1, string(resource))
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
