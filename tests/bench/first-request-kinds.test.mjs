// bench/first-request.mjs's split of a first request's instructions by
// kind of work: the names callgrind reports, each to its kind.
import { test } from "node:test";
import assert from "node:assert/strict";
import { kindOf } from "../../bench/first-request.mjs";

test("each function is counted as the work it does", () => {
  const cases = [
    ["wasm router_core::select::Ruleset::decide_from::h1a6b-113-liftoff", "wasm (the router's code)"],
    ["workerd v8::internal::wasm::WasmFullDecoder<v8::internal::wasm::Decoder::NoValidationTag>::DecodeFunctionBody()", "V8 wasm compilers"],
    ["workerd v8::internal::wasm::NativeModule::ApplyRelocations(v8::internal::WritableJitAllocation&)", "V8 wasm compilers"],
    ["workerd v8::internal::Assembler::emit_mov(v8::internal::Register, v8::internal::Operand, int)", "V8 code generation"],
    ["workerd v8::internal::SafepointTableBuilder::Commit(v8::internal::SafepointTableBuilder::Safepoint*)", "V8 code generation"],
    ["workerd v8::internal::CompareAndCreateXorPatch(v8::internal::Zone*)", "V8 code generation"],
    ["workerd v8::internal::Scanner::Next()", "V8 parser and bytecode"],
    ["workerd v8::internal::Heap::Scavenge()", "V8 heap and GC"],
    ["workerd v8::internal::LookupIterator::Next()", "V8 runtime (other)"],
    ["js Bn file:///bundle/worker/shim.mjs:1:19050", "JavaScript"],
    ["libc.so.6 __memcpy_avx_unaligned_erms", "libc"],
  ];
  for (const [name, kind] of cases) assert.equal(kindOf(name), kind, name);
});
