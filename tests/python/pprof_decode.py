"""Decodes a pprof profile with Google's protobuf package, independently of dmem's encoder.

    python3 pprof_decode.py FILE        (FILE gzipped or not, '-' for stdin)

prints one JSON document: the raw tables (string table, sample types, mappings, functions,
locations, samples) with plain integers, plus `stacks`, each sample resolved through the tables
into frames, so a test can check both the wire format and what a viewer would show.

protoc may be absent, so the message classes are built here from a descriptor written out by
hand with descriptor_pb2, field for field as in proto/profile.proto of github.com/google/pprof.
"""

import gzip
import json
import sys

from google.protobuf import descriptor_pb2, descriptor_pool, message_factory

F = descriptor_pb2.FieldDescriptorProto
OPT, REP = F.LABEL_OPTIONAL, F.LABEL_REPEATED
I64, U64, BOOL, STR, MSG = F.TYPE_INT64, F.TYPE_UINT64, F.TYPE_BOOL, F.TYPE_STRING, F.TYPE_MESSAGE

# message -> [(field name, number, label, type, message type name)], from profile.proto.
MESSAGES = {
    "Profile": [
        ("sample_type", 1, REP, MSG, "ValueType"),
        ("sample", 2, REP, MSG, "Sample"),
        ("mapping", 3, REP, MSG, "Mapping"),
        ("location", 4, REP, MSG, "Location"),
        ("function", 5, REP, MSG, "Function"),
        ("string_table", 6, REP, STR, None),
        ("drop_frames", 7, OPT, I64, None),
        ("keep_frames", 8, OPT, I64, None),
        ("time_nanos", 9, OPT, I64, None),
        ("duration_nanos", 10, OPT, I64, None),
        ("period_type", 11, OPT, MSG, "ValueType"),
        ("period", 12, OPT, I64, None),
        ("comment", 13, REP, I64, None),
        ("default_sample_type", 14, OPT, I64, None),
    ],
    "ValueType": [("type", 1, OPT, I64, None), ("unit", 2, OPT, I64, None)],
    "Sample": [
        ("location_id", 1, REP, U64, None),
        ("value", 2, REP, I64, None),
        ("label", 3, REP, MSG, "Label"),
    ],
    "Label": [
        ("key", 1, OPT, I64, None),
        ("str", 2, OPT, I64, None),
        ("num", 3, OPT, I64, None),
        ("num_unit", 4, OPT, I64, None),
    ],
    "Mapping": [
        ("id", 1, OPT, U64, None),
        ("memory_start", 2, OPT, U64, None),
        ("memory_limit", 3, OPT, U64, None),
        ("file_offset", 4, OPT, U64, None),
        ("filename", 5, OPT, I64, None),
        ("build_id", 6, OPT, I64, None),
        ("has_functions", 7, OPT, BOOL, None),
        ("has_filenames", 8, OPT, BOOL, None),
        ("has_line_numbers", 9, OPT, BOOL, None),
        ("has_inline_frames", 10, OPT, BOOL, None),
    ],
    "Location": [
        ("id", 1, OPT, U64, None),
        ("mapping_id", 2, OPT, U64, None),
        ("address", 3, OPT, U64, None),
        ("line", 4, REP, MSG, "Line"),
        ("is_folded", 5, OPT, BOOL, None),
    ],
    "Line": [("function_id", 1, OPT, U64, None), ("line", 2, OPT, I64, None)],
    "Function": [
        ("id", 1, OPT, U64, None),
        ("name", 2, OPT, I64, None),
        ("system_name", 3, OPT, I64, None),
        ("filename", 4, OPT, I64, None),
        ("start_line", 5, OPT, I64, None),
    ],
}


def profile_class():
    fd = descriptor_pb2.FileDescriptorProto(
        name="profile.proto", package="perftools.profiles", syntax="proto3")
    for name, fields in MESSAGES.items():
        m = fd.message_type.add(name=name)
        for fname, number, label, ftype, tname in fields:
            f = m.field.add(name=fname, number=number, label=label, type=ftype)
            if tname:
                f.type_name = ".perftools.profiles." + tname
    pool = descriptor_pool.DescriptorPool()
    pool.Add(fd)
    desc = pool.FindMessageTypeByName("perftools.profiles.Profile")
    factory = message_factory.MessageFactory(pool)
    get = getattr(message_factory, "GetMessageClass", None) or factory.GetPrototype
    return get(desc)


def plain(msg):
    """A message as a dict of plain values (every field, set or not)."""
    out = {}
    for field in msg.DESCRIPTOR.fields:
        v = getattr(msg, field.name)
        if field.type == F.TYPE_MESSAGE:
            if field.label == REP:
                v = [plain(x) for x in v]
            else:
                v = plain(v) if msg.HasField(field.name) else None
        elif field.label == REP:
            v = list(v)
        out[field.name] = v
    return out


def decode(data):
    if data[:2] == b"\x1f\x8b":
        data = gzip.decompress(data)
    prof = profile_class()()
    prof.ParseFromString(data)
    return prof


def resolve(prof):
    """Each sample with its values, labels and frames spelled out, leaf first."""
    s = prof.string_table
    funcs = {f.id: f for f in prof.function}
    maps = {m.id: m for m in prof.mapping}
    locs = {loc.id: loc for loc in prof.location}
    stacks = []
    for sample in prof.sample:
        frames = []
        for lid in sample.location_id:
            loc = locs[lid]
            m = maps.get(loc.mapping_id)
            # Inlined functions first, the function they were inlined into last.
            lines = [{"function": s[funcs[ln.function_id].name],
                      "system_name": s[funcs[ln.function_id].system_name],
                      "file": s[funcs[ln.function_id].filename],
                      "line": ln.line} for ln in loc.line]
            frames.append({"address": loc.address, "lines": lines,
                           "object": s[m.filename] if m else None,
                           "build_id": s[m.build_id] if m else None})
        labels = [{"key": s[lb.key], "str": s[lb.str], "num": lb.num,
                   "num_unit": s[lb.num_unit]} for lb in sample.label]
        stacks.append({"values": list(sample.value), "labels": labels, "frames": frames})
    return stacks


def main():
    path = sys.argv[1]
    data = sys.stdin.buffer.read() if path == "-" else open(path, "rb").read()
    prof = decode(data)
    doc = plain(prof)
    doc["stacks"] = resolve(prof)
    json.dump(doc, sys.stdout)
    sys.stdout.write("\n")


if __name__ == "__main__":
    main()
