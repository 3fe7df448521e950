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
      "Install the server: pip install saipling-search",
      'Or point setup{ cmd = { "/path/to/python", "-m", "saipling", "serve" } } at a virtualenv',
    })
  else
    health.ok(("server command: %s (%s)"):format(table.concat(cmd, " "), exe))
    local mod_ok, detail = check_module(cmd)
    if mod_ok == true then
      health.ok(("%s can import %s"):format(cmd[1], cmd[3]))
    elseif mod_ok == false then
      health.error(("%s cannot import %s"):format(cmd[1], cmd[3]), { detail or "", "pip install saipling-search" })
    end
  end

  local clients = vim.lsp.get_clients({ name = saipling.name })
  if #clients == 0 then
    health.info("no saipling client running (it starts with the first markdown buffer under a project root)")
  else
    for _, client in ipairs(clients) do
      local bufs = vim.tbl_keys(client.attached_buffers or {})
      health.info(("client %d attached to %d buffer(s), root %s"):format(client.id, #bufs, client.root_dir or "?"))
    end
  end

  local picker = require("saipling.picker").resolve(opts.picker, true)
  health.info(("picker: %s (configured: %s)"):format(picker == "select" and "vim.ui.select" or picker, opts.picker))
end

return M
