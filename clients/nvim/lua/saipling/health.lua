---@mod saipling.health `:checkhealth saipling`
local M = {}

--- For `{python, "-m", "saipling", ...}`: can that interpreter import the package?
---@param cmd string[]
---@return boolean? ok nil when cmd is not a `-m` command
---@return string? detail
local function check_module(cmd)
  if cmd[2] ~= "-m" or not cmd[3] then
    return nil
  end
  local ok, res = pcall(function()
    return vim.system({ cmd[1], "-c", "import " .. cmd[3] }, { text = true }):wait(15000)
  end)
  if not ok then
    return false, tostring(res)
  end
  return res.code == 0, vim.trim(res.stderr or "")
end

local function val(x)
  if x == vim.NIL or x == "" then
    return nil
  end
  return x
end

local function human_size(bytes)
  local units = { "B", "KiB", "MiB", "GiB" }
  local i = 1
  while bytes >= 1024 and i < #units do
    bytes, i = bytes / 1024, i + 1
  end
  return i == 1 and ("%d %s"):format(bytes, units[i]) or ("%.1f %s"):format(bytes, units[i])
end

--- `saipling/status` from a running client, synchronously (nil and the error when it does not answer).
local function status_of(client)
  local ok, res, err
  if vim.fn.has("nvim-0.11") == 1 then
    ok, res, err = pcall(client.request_sync, client, "saipling/status", vim.empty_dict(), 5000)
  else
    ok, res, err = pcall(client.request_sync, "saipling/status", vim.empty_dict(), 5000)
  end
  if not ok then
    return nil, tostring(res)
  end
  if not res then
    return nil, tostring(err or "no answer within 5 s")
  end
  if res.err then
    return nil, res.err.message or vim.inspect(res.err)
  end
  return res.result
end

--- Root, provider, index size, pending work and degradation of one running server.
local function report_index(health, client)
  local s, err = status_of(client)
  if not s then
    health.error(("saipling/status failed: %s"):format(err))
    return
  end
  local info = type(client.server_info) == "table" and client.server_info or {}
  local version = val(s.version) or val(info.version)
  if version then
    health.ok(("server: saipling %s"):format(version))
  else
    health.warn("server version unknown (a saipling older than 0.1.0?)")
  end
  health.ok(("root: %s"):format(val(s.root) or client.root_dir or "?"))
  local model = val(s.model) and (" (" .. s.model .. ")") or ""
  local reason = val(s.providerReason) and (": " .. s.providerReason) or ""
  if val(s.provider) == "none" then
    health.warn(("provider: none%s (keyword search only)"):format(reason))
  else
    health.ok(("provider: %s%s%s"):format(val(s.provider) or "?", model, reason))
  end
  local size = ""
  local stat = val(s.indexPath) and vim.uv.fs_stat(s.indexPath)
  if stat then
    local bytes = stat.size
    local wal = vim.uv.fs_stat(s.indexPath .. "-wal") -- SQLite's write-ahead log, part of the index
    bytes = bytes + (wal and wal.size or 0)
    size = (", %s on disk (%s)"):format(human_size(bytes), s.indexPath)
  end
  health.ok(("index: %s files, %s chunks%s; last indexed %s"):format(
    val(s.totalFiles) or 0, val(s.totalChunks) or 0, size, val(s.lastIndexed) or "never"))
  local pending = val(s.pendingFiles) or 0
  local unembedded = val(s.unembeddedChunks)
  local work = {}
  if s.isIndexing == true then
    local p = type(s.progress) == "table" and s.progress or {}
    work[#work + 1] = ("indexing %s/%s files"):format(val(p.filesProcessed) or "?", val(p.filesTotal) or "?")
  end
  if pending ~= 0 then
    work[#work + 1] = ("%s file(s) waiting for the quiet period"):format(pending)
  end
  if unembedded and unembedded ~= 0 then
    work[#work + 1] = ("%s chunk(s) without embeddings"):format(unembedded)
  end
  health.info("pending work: " .. (#work > 0 and table.concat(work, "; ") or "none"))
  local phase = val(s.indexPhase) or (s.isIndexing == true and "indexing" or "idle")
  local state = ({ idle = "idle", keywords = "indexing (reading files)", embedding = "indexing (embedding)",
    paused = "paused (embedding stopped)" })[phase] or phase
  if val(s.readOnly) == true then
    state = state .. ", read-only"
  end
  health.info(("index state: %s"):format(state))
  local excluded = val(s.excludedFiles)
  if excluded and excluded ~= 0 then
    health.info(("excluded: %s file(s) kept out by .context_settings.json (:SaiplingSearch! reads them)"):format(excluded))
  end
  if val(s.degraded) then
    health.warn("degraded: " .. tostring(s.degraded))
  end
  for _, w in ipairs(type(s.warnings) == "table" and s.warnings or {}) do
    health.warn(tostring(w))
  end
end

function M.check()
  local health = vim.health
  health.start("saipling")

  local v = vim.version()
  local version = ("%d.%d.%d"):format(v.major, v.minor, v.patch)
  if vim.fn.has("nvim-0.10") == 1 then
    health.ok("Neovim " .. version)
  else
    health.error("Neovim " .. version .. " is too old", { "saipling needs Neovim >= 0.10" })
  end

  local saipling = require("saipling")
  local opts = require("saipling.config").options
  if not saipling._setup_done then
    health.warn("require('saipling').setup() has not been called; checking the defaults")
  end

  local cmd = opts.cmd or {}
  local exe = cmd[1] and vim.fn.exepath(cmd[1]) or ""
  if exe == "" then
    health.error(("server command %q is not executable"):format(tostring(cmd[1])), {
      "Install the server: pipx install 'saipling-search[local] @ git+https://github.com/saipling/saipling-search'",
      'Or point setup{ cmd = { "/path/to/python", "-m", "saipling", "serve" } } at a virtualenv',
    })
  else
    health.ok(("server command: %s (%s)"):format(table.concat(cmd, " "), exe))
    local mod_ok, detail = check_module(cmd)
    if mod_ok == true then
      health.ok(("%s can import %s"):format(cmd[1], cmd[3]))
    elseif mod_ok == false then
      health.error(("%s cannot import %s"):format(cmd[1], cmd[3]), {
        detail or "",
        ("%s -m pip install '/path/to/saipling-search[local]' (a clone: not on PyPI yet)"):format(cmd[1]),
      })
    end
  end

  -- The root the current file would get (checkhealth opens its own buffer: use the alternate/last file).
  local fname = vim.fn.expand("#:p")
  if fname == "" or vim.fn.filereadable(fname) ~= 1 then
    fname = vim.fn.getcwd() .. "/_"
  end
  local root, how = saipling.find_root(fname)
  if root then
    health.info(("root for %s: %s (%s)"):format(vim.fn.fnamemodify(fname, ":~:."), root, how))
  else
    health.warn(("no root for %s: %s"):format(vim.fn.fnamemodify(fname, ":~:."), how), {
      ":cd to the project, or add a project.json or .saipling folder at its root",
    })
  end

  local clients = vim.lsp.get_clients({ name = saipling.name })
  if #clients == 0 then
    health.info("no saipling server running (it starts with the first markdown buffer under a project root)")
  end
  for _, client in ipairs(clients) do
    local bufs = vim.tbl_keys(client.attached_buffers or {})
    health.start(("saipling server %d (%d buffer(s))"):format(client.id, #bufs))
    report_index(health, client)
  end

  health.start("saipling client")
  if saipling.last_error then
    health.warn(("last error (%s): %s"):format(saipling.last_error.time, saipling.last_error.msg))
  else
    health.ok("no errors so far")
  end
  local picker = require("saipling.picker").resolve(opts.picker, true)
  health.info(("picker: %s (configured: %s)"):format(picker == "select" and "vim.ui.select" or picker, opts.picker))
end

return M
