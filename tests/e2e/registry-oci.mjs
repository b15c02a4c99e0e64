// OCI image layouts written by hand (no docker, no tar binary): layers are
// gzip'd ustar archives built here, then the config, the manifest,
// index.json and oci-layout, as the OCI image-layout spec describes them.
// Also reads a layout back, to compare what a pull wrote.
import { createHash, randomBytes } from "node:crypto";
import { gzipSync } from "node:zlib";
import { mkdirSync, writeFileSync, readFileSync, existsSync } from "node:fs";
import { join } from "node:path";

export const MANIFEST_TYPE = "application/vnd.oci.image.manifest.v1+json";
const CONFIG_TYPE = "application/vnd.oci.image.config.v1+json";
const LAYER_TYPE = "application/vnd.oci.image.layer.v1.tar+gzip";

const sha256 = (buf) => createHash("sha256").update(buf).digest("hex");

/** One ustar header block for a regular file. */
function tarHeader(name, size) {
  const h = Buffer.alloc(512);
  const put = (offset, length, text) => h.write(text, offset, length, "ascii");
  const octal = (n, length) => n.toString(8).padStart(length - 1, "0") + "\0";
  put(0, 100, name);
  put(100, 8, octal(0o644, 8));
  put(108, 8, octal(0, 8));
  put(116, 8, octal(0, 8));
  put(124, 12, octal(size, 12));
  put(136, 12, octal(1_700_000_000, 12));
  h.fill(0x20, 148, 156); // checksum field counts as spaces
  put(156, 1, "0");
  put(257, 6, "ustar\0");
  put(263, 2, "00");
  put(265, 32, "root");
  put(297, 32, "root");
  let sum = 0;
  for (const b of h) sum += b;
  put(148, 8, sum.toString(8).padStart(6, "0") + "\0 ");
  return h;
}

/** A tar archive of `files` ([name, Buffer]) with the two end blocks. */
export function tar(files) {
  const parts = [];
  for (const [name, data] of files) {
    parts.push(tarHeader(name, data.length), data);
    const pad = (512 - (data.length % 512)) % 512;
    if (pad) parts.push(Buffer.alloc(pad));
  }
  parts.push(Buffer.alloc(1024));
  return Buffer.concat(parts);
}

function writeBlob(dir, buf) {
  const hex = sha256(buf);
  writeFileSync(join(dir, "blobs", "sha256", hex), buf);
  return { digest: `sha256:${hex}`, size: buf.length };
}

/**
 * Writes an OCI image layout at `dir` with one image tagged `tag` whose
 * layers hold random bytes of the given sizes (so every call makes new
 * digests). Returns the manifest digest, the config digest and the layer
 * digests, as the layout records them.
 */
export function writeOciImage(dir, tag, layerSizes = [1024, 256 * 1024, 2 * 1024 * 1024]) {
  mkdirSync(join(dir, "blobs", "sha256"), { recursive: true });
  const layers = [];
  const diffIds = [];
  layerSizes.forEach((size, i) => {
    const archive = tar([
      [`layer${i}/README`, Buffer.from(`layer ${i} of a test image for ${tag}\n`)],
      [`layer${i}/data.bin`, randomBytes(size)],
    ]);
    diffIds.push(`sha256:${sha256(archive)}`);
    layers.push({ mediaType: LAYER_TYPE, ...writeBlob(dir, gzipSync(archive)) });
  });
  const config = Buffer.from(
    JSON.stringify({
      architecture: "amd64",
      os: "linux",
      config: { Cmd: ["/bin/true"] },
      rootfs: { type: "layers", diff_ids: diffIds },
      history: layerSizes.map((_, i) => ({ created_by: `test layer ${i}` })),
    }),
  );
  const configDesc = { mediaType: CONFIG_TYPE, ...writeBlob(dir, config) };
  const manifest = Buffer.from(JSON.stringify({ schemaVersion: 2, mediaType: MANIFEST_TYPE, config: configDesc, layers }));
  const manifestDesc = writeBlob(dir, manifest);
  writeFileSync(
    join(dir, "index.json"),
    JSON.stringify({
      schemaVersion: 2,
      manifests: [{ mediaType: MANIFEST_TYPE, ...manifestDesc, annotations: { "org.opencontainers.image.ref.name": tag } }],
    }),
  );
  writeFileSync(join(dir, "oci-layout"), JSON.stringify({ imageLayoutVersion: "1.0.0" }));
  return {
    manifestDigest: manifestDesc.digest,
    configDigest: configDesc.digest,
    layerDigests: layers.map((l) => l.digest),
    blobDigests: [configDesc.digest, ...layers.map((l) => l.digest)],
  };
}

/**
 * Reads the image tagged `tag` back from a layout: the manifest digest in
 * index.json, the digests its manifest names, and whether every blob file's
 * content hashes to its name.
 */
export function readOciImage(dir, tag) {
  const index = JSON.parse(readFileSync(join(dir, "index.json"), "utf8"));
  const desc = index.manifests.find((m) => m.annotations?.["org.opencontainers.image.ref.name"] === tag) ?? index.manifests[0];
  const blob = (digest) => {
    const path = join(dir, "blobs", ...digest.split(":"));
    return existsSync(path) ? readFileSync(path) : null;
  };
  const manifest = JSON.parse(blob(desc.digest).toString("utf8"));
  const all = [desc.digest, manifest.config.digest, ...manifest.layers.map((l) => l.digest)];
  const intact = all.every((d) => {
    const b = blob(d);
    return b !== null && `sha256:${sha256(b)}` === d;
  });
  return {
    manifestDigest: desc.digest,
    mediaType: desc.mediaType,
    configDigest: manifest.config.digest,
    layerDigests: manifest.layers.map((l) => l.digest),
    intact,
  };
}
