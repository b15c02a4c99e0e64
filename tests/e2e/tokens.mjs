// GitLab routable tokens made the way GitLab's
// Authn::TokenField::Generator::RoutableToken makes them, written
// independently of the Rust decoder so the two check each other:
// <prefix><base64url(16 random bytes | payload | payload length)>.01.<len base36 (2)><crc32 base36 (7)>
import { crc32 } from "node:zlib";
import { randomBytes } from "node:crypto";

export function routableToken(prefix, fields, random = randomBytes(16)) {
  const payload = Object.keys(fields)
    .sort()
    .map((k) => `${k}:${Number(fields[k]).toString(36)}`)
    .join("\n");
  const raw = Buffer.concat([random, Buffer.from(payload), Buffer.from([payload.length])]);
  const encoded = raw.toString("base64url");
  const body = `${prefix}${encoded}.01.${encoded.length.toString(36).padStart(2, "0")}`;
  return body + crc32(body).toString(36).padStart(7, "0");
}

export const basic = (user, password) => `Basic ${Buffer.from(`${user}:${password}`).toString("base64")}`;
