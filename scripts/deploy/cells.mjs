// GITLAB_CELLS as the router reads it (router_core::cells::CellList), checked
// before a deploy: at run time a bad entry is only logged and left out, which
// would silently take a cell out of static resolution, health and spreading.
const FIELDS = new Set(["id", "address", "registry_address", "session_prefix", "health_path"]);

/** host[:port] as router_core::forward::validate_address accepts it. */
function addressProblem(address) {
  if (typeof address !== "string") return "not a string";
  if (/[/@?#\\\s[\]]/.test(address)) return `${JSON.stringify(address)}: expected host[:port] only`;
  const colon = address.lastIndexOf(":");
  const host = colon === -1 ? address : address.slice(0, colon);
  const port = colon === -1 ? null : address.slice(colon + 1);
  if (host === "" || host.length > 253) return `${JSON.stringify(address)}: empty or overlong host`;
  const label = /^[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?$/;
  if (!host.split(".").every((l) => label.test(l))) return `${JSON.stringify(address)}: not a host name`;
  if (port !== null && !(/^[0-9]{1,5}$/.test(port) && Number(port) > 0 && Number(port) <= 65535)) {
    return `${JSON.stringify(address)}: bad port`;
  }
  return null;
}

/** Every problem of a GITLAB_CELLS value (a JSON text), as sentences; [] when it is valid. */
export function cellsProblems(text) {
  let list;
  try {
    list = JSON.parse(text);
  } catch (e) {
    return [`not JSON: ${e.message}`];
  }
  if (!Array.isArray(list)) return ["not a JSON list"];
  const problems = [];
  const seen = { id: new Set(), session_prefix: new Set(), address: new Set() };
  list.forEach((cell, i) => {
    const at = `entry ${i + 1}`;
    if (cell === null || typeof cell !== "object" || Array.isArray(cell)) {
      problems.push(`${at}: not an object`);
      return;
    }
    for (const key of Object.keys(cell)) if (!FIELDS.has(key)) problems.push(`${at}: unknown field ${JSON.stringify(key)}`);
    const { id } = cell;
    const idOk = (Number.isSafeInteger(id) && id >= 0) || (typeof id === "string" && /^[0-9]+$/.test(id));
    if (!idOk) {
      problems.push(`${at}: id ${JSON.stringify(id)}: not a non-negative integer`);
      return;
    }
    const name = `${at} (cell ${Number(id)})`;
    if (cell.address === undefined) problems.push(`${name}: no address`);
    else if (addressProblem(cell.address)) problems.push(`${name}: address: ${addressProblem(cell.address)}`);
    if (cell.registry_address !== undefined && cell.registry_address !== null && addressProblem(cell.registry_address)) {
      problems.push(`${name}: registry_address: ${addressProblem(cell.registry_address)}`);
    }
    const prefix = cell.session_prefix ?? `cell-${Number(id)}`;
    if (typeof prefix !== "string" || !/^[A-Za-z0-9_-]+$/.test(prefix)) {
      problems.push(`${name}: session_prefix ${JSON.stringify(prefix)}: want letters, digits, - and _`);
    }
    const health = cell.health_path ?? "/-/readiness";
    if (typeof health !== "string" || !health.startsWith("/") || health.startsWith("//") || /[\s#\u0000-\u001f\u007f]/.test(health)) {
      problems.push(`${name}: health_path ${JSON.stringify(health)}: want an absolute path (/-/readiness)`);
    }
    for (const [key, value] of [["id", Number(id)], ["session_prefix", prefix], ["address", cell.address]]) {
      if (seen[key].has(value)) problems.push(`${name}: ${key} ${JSON.stringify(value)} is already listed`);
      seen[key].add(value);
    }
  });
  return problems;
}
