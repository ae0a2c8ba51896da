#!/usr/bin/env python3
"""Writes the seed inputs of fuzz/corpus/<target>/ from real files of the repository.

Run from the repository root: python3 fuzz/seeds/make_seeds.py
Needs: openssl (signs a real SIGNATURE), SUMO 1.28 (`sumo` on PATH, for a tripinfo file).
The log_segment seeds come from crates/fuzz-targets/tests/replay_corpora.rs
(`write_log_seeds`, run with GW_WRITE_LOG_SEEDS=1), which uses the log writer itself.
"""
import hashlib, os, shutil, struct, subprocess, tempfile, zlib

C = "fuzz/corpus"

def put(target, name, data):
    os.makedirs(f"{C}/{target}", exist_ok=True)
    with open(f"{C}/{target}/{name}", "wb") as f:
        f.write(data)

def read(p):
    with open(p, "rb") as f:
        return f.read()

# --- onnx_policy: the shipped policy.
put("onnx_policy", "single-4way.onnx", read("models/single-4way.onnx"))

# --- bundle: odd first byte = manifest.json / blob, even = SIGNATURE.
put("bundle", "manifest.json", b"\x01" + read("models/single-4way.manifest.json"))
put("bundle", "policy.blob", b"\x01" + read("models/single-4way.blob"))
put("bundle", "policy.int8.blob", b"\x01" + read("models/single-4way.int8.blob"))
files = {
    "manifest.json": read("models/single-4way.manifest.json"),
    "policy.blob": read("models/single-4way.blob"),
    "policy.int8.blob": read("models/single-4way.int8.blob"),
    "policy.onnx": read("models/single-4way.onnx"),
}
with tempfile.TemporaryDirectory() as d:
    key = f"{d}/k.pem"
    subprocess.run(["openssl", "genpkey", "-algorithm", "ed25519", "-out", key], check=True)
    pub = subprocess.run(["openssl", "pkey", "-in", key, "-pubout", "-outform", "DER"],
                         check=True, capture_output=True).stdout[-32:]
    text = f"greenwave-bundle v1\nsigner {pub.hex()}\n"
    for name in sorted(files):
        text += f"file {name} {len(files[name])} {hashlib.sha256(files[name]).hexdigest()}\n"
    with open(f"{d}/msg", "w") as f:
        f.write(text)
    sig = subprocess.run(["openssl", "pkeyutl", "-sign", "-inkey", key, "-rawin", "-in", f"{d}/msg"],
                         check=True, capture_output=True).stdout
    assert len(sig) == 64
    put("bundle", "SIGNATURE", b"\x00" + (text + f"signature {sig.hex()}\n").encode())

# --- scenario_toml: every shipped scenario file.
for p in ["crates/sim/scenarios/single-4way.toml", "crates/runtime/scenarios/finetune-shift.toml",
          "crates/sim/tests/data/single-approach.toml", "crates/sim/tests/data/sumo-single-twin.toml"]:
    put("scenario_toml", os.path.basename(p), read(p))

# --- firmware_frames: COBS(postcard(Transition) ++ crc32 LE) 0x00, as the firmware writes them.
def varint(n):
    out = b""
    while True:
        b = n & 0x7F
        n >>= 7
        if n:
            out += bytes([b | 0x80])
        else:
            return out + bytes([b])

def transition(seq, n_obs):
    obs = [((seq * 31 + j) % 97) / 97.0 for j in range(n_obs)]
    nxt = [((seq * 17 + j) % 89) / 89.0 for j in range(n_obs)]
    f32s = lambda v: varint(len(v)) + b"".join(struct.pack("<f", x) for x in v)
    return (varint(1000 * seq) + varint(seq % 2) + f32s(obs) + bytes([seq % 4, (seq + 1) % 4])
            + struct.pack("<ff", -0.5, -(seq % 7)) + f32s(nxt) + bytes([seq % 50 == 49])
            + varint(3) + varint(seq % 3))

def cobs(data):
    out, block = bytearray(), bytearray()
    for b in data:
        if b == 0:
            out += bytes([len(block) + 1]) + block
            block = bytearray()
        else:
            block.append(b)
            if len(block) == 254:
                out += bytes([255]) + block
                block = bytearray()
    return bytes(out + bytes([len(block) + 1]) + block)

def frame(payload):
    return cobs(payload + struct.pack("<I", zlib.crc32(payload))) + b"\x00"

put("firmware_frames", "one-frame-31", frame(transition(1, 31)))
put("firmware_frames", "stream-3-frames", b"".join(frame(transition(s, 31)) for s in range(3)))
put("firmware_frames", "noise-then-frame", b"\x13\x37\xff\x00" + frame(transition(7, 12)))
put("firmware_frames", "one-frame-96", frame(transition(5, 96)))

# --- sumo_xml: even first byte = net, odd = tripinfo.
put("sumo_xml", "single.net.xml", b"\x00" + read("crates/sim/fixtures/sumo/single.net.xml"))
put("sumo_xml", "notls.net.xml", b"\x00" + read("crates/sim/fixtures/sumo/notls.net.xml"))
# A net, a NUL, then an additional file with a second program and a WAUT binding the light.
put("sumo_xml", "single-waut.net.xml", b"\x00" + read("crates/sim/fixtures/sumo/single.net.xml")
    + b"\x00" + b"""<additional>
<tlLogic id="A0" type="static" programID="late" offset="62">
<phase duration="42" state="GGGgrrrrGGGgrrrr"/><phase duration="3" state="yyyyrrrryyyyrrrr"/>
<phase duration="42" state="rrrrGGGgrrrrGGGg"/><phase duration="3" state="rrrryyyyrrrryyyy"/>
</tlLogic>
<WAUT id="w" refTime="0" startProg="0" period="86400"><wautSwitch time="7:00:00" to="late"/>
<wautSwitch time="100" to="0"/></WAUT>
<wautJunction wautID="w" junctionID="A0"/>
</additional>""")
# The same net with a NEMA program for its light in an additional file: two rings, barriers,
# per-phase yellow and red (read as its dual-ring stages, crates/sim/src/sumo/nema.rs).
NEMA_ADD = b"""<additional>
<tlLogic id="A0" type="NEMA" programID="nema" offset="0">
<phase duration="20" state="rrrrrrrrrrrGrrrr" minDur="4" maxDur="20" yellow="3" red="1" name="1"/>
<phase duration="40" state="rrrrrrrrGGGgrrrr" minDur="5" maxDur="50" yellow="4" red="2" name="2"/>
<phase duration="40" state="rrrrrrrrrrrrGGGg" minDur="5" maxDur="45" yellow="3" red="2" name="4"/>
<phase duration="20" state="rrrGrrrrrrrrrrrr" minDur="4" maxDur="20" yellow="3" red="1" name="5"/>
<phase duration="40" state="GGGgrrrrrrrrrrrr" minDur="5" maxDur="50" yellow="4" red="2" name="6"/>
<phase duration="40" state="rrrrGGGgrrrrrrrr" minDur="5" maxDur="45" yellow="3" red="0" name="8"/>
<param key="barrier2Phases" value="2,6"/><param key="barrierPhases" value="4,8"/>
<param key="ring1" value="1,2,0,4"/><param key="ring2" value="5,6,0,8"/>
</tlLogic>
</additional>"""
put("sumo_xml", "single-nema.net.xml", b"\x00" + read("crates/sim/fixtures/sumo/single.net.xml")
    + b"\x00" + NEMA_ADD)
with tempfile.TemporaryDirectory() as d:
    subprocess.run(["sumo", "-c", "crates/sim/fixtures/sumo/single.sumocfg", "--end", "240",
                    "--tripinfo-output", f"{d}/tripinfo.xml", "--no-step-log", "true"],
                   check=True, capture_output=True)
    put("sumo_xml", "tripinfo.xml", b"\x01" + read(f"{d}/tripinfo.xml"))
if os.environ.get("SUMO_HOME"):
    # Pedestrians: SUMO's game junction fokr_bs_demo, its pedestrian flows, 300 s.
    g = os.path.join(os.environ["SUMO_HOME"], "tools/game/fokr_bs_demo")
    with tempfile.TemporaryDirectory() as d:
        subprocess.run(["sumo", "-n", f"{g}/fokr_bs.net.xml.gz", "-r",
                        f"{g}/15_16_ped.trips.xml", "-a", f"{g}/vtypes_default.add.xml",
                        "-b", "54000", "-e", "54300", "--xml-validation", "never",
                        "--tripinfo-output", f"{d}/t.xml",
                        "--tripinfo-output.write-unfinished", "--no-step-log", "true"],
                       check=True, capture_output=True)
        text = read(f"{d}/t.xml")
        # Keep it small: the first 60 elements and the closing tag.
        lines = text.split(b"\n")
        put("sumo_xml", "tripinfo-persons.xml",
            b"\x01" + b"\n".join(lines[:60]) + b"\n</tripinfos>\n")

# --- sumo_config: the fixture's configuration and the game configurations SUMO ships.
put("sumo_config", "single.sumocfg", read("crates/sim/fixtures/sumo/single.sumocfg"))
if os.environ.get("SUMO_HOME"):
    game = os.path.join(os.environ["SUMO_HOME"], "tools/game")
    for name in ["fokr_bs_demo.sumocfg", "DRT.sumocfg", "rail.sumocfg", "square.sumocfg"]:
        put("sumo_config", name, read(os.path.join(game, name)))

# --- traci_reply: first byte picks the request (see targets.rs REQUESTS), then the body.
def s(x):
    x = x.encode()
    return struct.pack(">i", len(x)) + x

def status(cmd, result=0, msg=""):
    body = bytes([cmd, result]) + s(msg)
    return bytes([len(body) + 1]) + body

def short(body):
    return bytes([len(body) + 1]) + body

version = status(0x00) + short(bytes([0x00]) + struct.pack(">i", 22) + s("SUMO 1.28.0"))
put("traci_reply", "getVersion", b"\x00" + version)
sub = (bytes([0xe3]) + s("A0B0_0") + bytes([3])
       + bytes([0x10, 0, 0x09]) + struct.pack(">i", 4)
       + bytes([0x14, 0, 0x09]) + struct.pack(">i", 2)
       + bytes([0x7a, 0, 0x0b]) + struct.pack(">d", 17.5))
step = status(0x02) + struct.pack(">i", 2) + short(sub) + short(sub.replace(b"A0B0_0", b"A0B0_1"))
put("traci_reply", "simulationStep", b"\x01" + step)
getter = status(0xa3) + short(bytes([0xb3, 0x14]) + s("A0B0_0") + bytes([0x09]) + struct.pack(">i", 3))
put("traci_reply", "lane-getter", b"\x02" + getter)
put("traci_reply", "subscribe", b"\x03" + status(0xd3) + short(sub))
put("traci_reply", "set-tl", b"\x04" + status(0xc2))
put("traci_reply", "set-tl-then-step", b"\x05" + status(0xc2) + step)
simget = status(0xab) + short(bytes([0xbb, 0x66]) + s("") + bytes([0x0b]) + struct.pack(">d", 120.0))
put("traci_reply", "sim-getters", b"\x06" + simget + simget)
put("traci_reply", "close", b"\x07" + status(0x7f))
put("traci_reply", "refused", b"\x04" + status(0xc2, 0xff, "Traffic light 'X' is not known"))
# A junction context subscription (vehicles' lane, position, accumulated waiting time).
ctx = bytes([0x99]) + s("J1") + bytes([0xa4, 3]) + struct.pack(">i", 2)
for veh, lane, pos, wait in [("v0", "A0B0_0", 41.5, 12.0), ("v1", ":J1_0_0", 1.0, 0.0)]:
    ctx += (s(veh) + bytes([0x51, 0, 0x0c]) + s(lane) + bytes([0x56, 0, 0x0b])
            + struct.pack(">d", pos) + bytes([0x87, 0, 0x0b]) + struct.pack(">d", wait))
put("traci_reply", "context-subscribe", b"\x08" + status(0x89) + short(ctx))
put("traci_reply", "step-with-context", b"\x01" + status(0x02) + struct.pack(">i", 2)
    + short(sub) + short(ctx))

# --- log_segment: segments in the transition log's formats (v2 written like LogWriter does;
# v1 as the first format). crates/fuzz-targets/tests/replay_corpora.rs (`write_log_seeds`)
# adds segments written by the log writer itself.
def seg_header(index, version):
    h = b"GWTL" + struct.pack("<HHQQ", version, 28, index, 1_700_000_000_000)
    return h + struct.pack("<I", zlib.crc32(h))

def frame_v2(payload):
    head = bytes([0x9E]) + b"GWR" + struct.pack("<II", len(payload), zlib.crc32(payload))
    return head + struct.pack("<I", zlib.crc32(head)) + payload

def frame_v1(payload):
    return struct.pack("<II", len(payload), zlib.crc32(payload)) + payload

v2 = seg_header(3, 2) + b"".join(frame_v2(transition(s, 31)) for s in range(6))
put("log_segment", "py-v2-6-records", v2)
put("log_segment", "py-v1-4-records", seg_header(0, 1) + b"".join(frame_v1(transition(s, 12)) for s in range(4)))
damaged = bytearray(v2)
damaged[len(v2) // 2] ^= 0x10
put("log_segment", "py-v2-bit-flip", bytes(damaged))
put("log_segment", "py-v2-torn-header", v2[40:])

# --- site_config: even first byte = a site configuration TOML, odd = a replay file. Written
# by the binaries themselves: $GREENWAVE (greenwave built with feature sumo, default
# target/release/greenwave) and target/release/greenwave-controller.
GW = os.environ.get("GREENWAVE", "target/release/greenwave")
CTL = "target/release/greenwave-controller"
with tempfile.TemporaryDirectory() as d:
    subprocess.run([GW, "site", "--scenario", "single-4way", "--out", f"{d}/s.toml"],
                   check=True, capture_output=True)
    site = read(f"{d}/s.toml")
    put("site_config", "single-4way.toml", b"\x00" + site)
    subprocess.run([GW, "site", "--scenario", "arterial-3", "--out", f"{d}/a.toml"],
                   check=True, capture_output=True)
    put("site_config", "arterial-3.toml", b"\x00" + read(f"{d}/a.toml"))
    subprocess.run([GW, "site", "--backend", "sumo", "--net", "crates/sim/fixtures/sumo/single.net.xml",
                    "--routes", "crates/sim/fixtures/sumo/single.rou.xml", "--out", f"{d}/sumo.toml"],
                   check=True, capture_output=True)
    sumo_site = read(f"{d}/sumo.toml")
    put("site_config", "sumo-single-clock.toml", b"\x00" + sumo_site)
    put("site_config", "sumo-single-clock-unix.toml",
        b"\x00" + b'program_clock_time = "unix"\n' + sumo_site)
    # No bundle: the fallback runs, and the detector readings are recorded all the same.
    nob = ["--bundle", f"{d}/none", "--trust", f"{d}/none"]
    subprocess.run([CTL, "--quiet", "run", *nob, "--scenario", "single-4way", "--seconds", "60",
                    "--log-dir", f"{d}/log", "--record", f"{d}/r.jsonl"],
                   check=True, capture_output=True)
    put("site_config", "single-4way.replay.jsonl", b"\x01" + read(f"{d}/r.jsonl"))
    subprocess.run([CTL, "--quiet", "run", *nob, "--site", f"{d}/s.toml", "--scenario", "single-4way",
                    "--fallback", "actuated", "--seconds", "30",
                    "--log-dir", f"{d}/log2", "--record", f"{d}/r2.jsonl"],
                   check=True, capture_output=True)
    put("site_config", "single-4way-actuated.replay.jsonl", b"\x01" + read(f"{d}/r2.jsonl"))
